package policy

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy/config"
)

const matchConfig = `
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "login"
upstream = "up"
match = { methods = ["POST"], path = "/login" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1m"

[[policy]]
name = "sub"
upstream = "up"
match = { hosts = ["*.example.com", "Exact.Example.org."] }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1m"

[[policy]]
name = "api"
upstream = "up"
match = { path_prefix = "/api/", headers = { "X-Plan" = "free", "X-Key" = "*" } }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1m"

[[policy]]
name = "re"
upstream = "up"
match = { path_regex = "^/v[0-9]+/" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1m"
`

// TestMatch: policies are tried in file order, the first whose every
// condition holds wins, and hosts compare in their canonical form.
func TestMatch(t *testing.T) {
	cfg, err := config.Parse("m.toml", []byte(matchConfig))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, target, host string
		headers              map[string]string
		want                 string // "" for none
	}{
		{"POST", "/login", "x.org", nil, "login"},
		{"GET", "/login", "x.org", nil, ""},
		{"POST", "/login", "a.example.com", nil, "login"}, // first wins
		{"GET", "/", "a.example.com", nil, "sub"},
		{"GET", "/", "a.b.example.com:8080", nil, "sub"},
		{"GET", "/", "example.com", nil, ""}, // *. matches sub-domains only
		{"GET", "/", "exact.example.org", nil, "sub"},
		{"GET", "/api/x", "x.org", map[string]string{"X-Plan": "free", "X-Key": "k"}, "api"},
		{"GET", "/api/x", "x.org", map[string]string{"X-Plan": "paid", "X-Key": "k"}, ""},
		{"GET", "/api/x", "x.org", map[string]string{"X-Plan": "free"}, ""},
		{"GET", "/v2/items", "x.org", nil, "re"},
		{"GET", "/w2/items", "x.org", nil, ""},
	} {
		r := httptest.NewRequest(c.method, "http://"+c.host+c.target, nil)
		for k, v := range c.headers {
			r.Header.Set(k, v)
		}
		got := ""
		if p, ok := set.Match(r); ok {
			got = p.Name
		}
		if got != c.want {
			t.Errorf("%s %s (Host %s, %v): policy %q, want %q", c.method, c.target, c.host, c.headers, got, c.want)
		}
	}
	if _, err := Compile(cfg, nil, time.Now()); err == nil {
		t.Error("Compile accepted a nil store")
	}
}
