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

// TestMatchDescriptor: an RLS policy never matches an HTTP request, even
// first in the file with no HTTP condition (nor through the index of a
// large set); a descriptor gets the first RLS policy of its domain whose
// patterns match its entries one for one.
func TestMatchDescriptor(t *testing.T) {
	src := "[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n"
	rls := func(name, domain, desc string) string {
		return "[[policy]]\nname = \"" + name + "\"\nmatch = { rls_domain = \"" + domain + "\", descriptor = " + desc + " }\n" +
			"  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n"
	}
	src += rls("login", "edge", `["generic_key=login", "remote_address"]`)
	src += rls("orders", "edge", `["path=/v*/users/*/orders"]`)
	src += rls("aa", "edge", `["x=a*a"]`)
	src += rls("v1", "edge", `["path=/v1/*"]`)
	src += rls("any-path", "edge", `["path"]`)
	src += rls("other", "internal", `["path"]`)
	for i := range 10 { // past smallSet: the index is asked
		src += "[[policy]]\nname = \"p" + string(rune('a'+i)) + "\"\nupstream = \"up\"\nmatch = { path = \"/p" + string(rune('a'+i)) + "\" }\n" +
			"  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n"
	}
	src += "[[policy]]\nname = \"http\"\nupstream = \"up\"\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n"
	cfg, err := config.Parse("d.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/v1/x", "/login"} {
		if p, ok := set.Match(httptest.NewRequest("GET", path, nil)); !ok || p.Name != "http" {
			t.Errorf("HTTP %s matched %v", path, p)
		}
		if p, ok := set.scan(httptest.NewRequest("GET", path, nil)); !ok || p.Name != "http" {
			t.Errorf("HTTP %s (scan) matched %v", path, p)
		}
	}
	e := func(kv ...string) []DescriptorEntry {
		var out []DescriptorEntry
		for i := 0; i < len(kv); i += 2 {
			out = append(out, DescriptorEntry{kv[i], kv[i+1]})
		}
		return out
	}
	for _, c := range []struct {
		domain  string
		entries []DescriptorEntry
		want    string
	}{
		{"edge", e("generic_key", "login", "remote_address", "192.0.2.1"), "login"},
		{"edge", e("generic_key", "logout", "remote_address", "192.0.2.1"), ""},
		{"edge", e("generic_key", "login"), ""},
		{"edge", e("remote_address", "192.0.2.1", "generic_key", "login"), ""},
		{"edge", e("path", "/v1/users"), "v1"},
		{"edge", e("path", "/v2/users/42/orders"), "orders"},
		{"edge", e("path", "/v1/users/42/orders"), "orders"},
		{"edge", e("path", "/v2/users/42/orders/1"), "any-path"},
		{"edge", e("x", "a"), ""},
		{"edge", e("x", "aa"), "aa"},
		{"edge", e("x", "abca"), "aa"},
		{"edge", e("path", "/v2/users"), "any-path"},
		{"edge", e("path", "/v1/users", "extra", "x"), ""},
		{"internal", e("path", "/v1/users"), "other"},
		{"nowhere", e("path", "/"), ""},
	} {
		p, ok := set.MatchDescriptor(c.domain, c.entries)
		got := ""
		if ok {
			got = p.Name
		}
		if got != c.want {
			t.Errorf("%s %v: %q, want %q", c.domain, c.entries, got, c.want)
		}
	}
}
