package policy

import (
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestMatchBucket: a bucket's entries match a policy's patterns in any
// order, all of them, one entry per pattern; a key the patterns name
// twice never matches a map.
func TestMatchBucket(t *testing.T) {
	cfg, err := config.Parse("b.toml", []byte(`
[[policy]]
name = "login"
match = { rls_domain = "d", descriptor = ["path=/login", "ip"] }
key = ["descriptor:ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "5/m"

[[policy]]
name = "twice"
match = { rls_domain = "d", descriptor = ["files=top/*", "files"] }

[[policy]]
name = "api"
match = { rls_domain = "d", descriptor = ["ip", "path=/v1/*"] }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "5/m"
`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
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
		order   []DescriptorEntry
	}{
		{"d", e("ip", "1", "path", "/login"), "login", e("path", "/login", "ip", "1")},
		{"d", e("path", "/login", "ip", "1"), "login", e("path", "/login", "ip", "1")},
		{"d", e("path", "/v1/x", "ip", "1"), "api", e("ip", "1", "path", "/v1/x")},
		{"d", e("path", "/v2/x", "ip", "1"), "", nil},
		{"d", e("ip", "1"), "", nil},
		{"d", e("ip", "1", "path", "/login", "x", "y"), "", nil},
		{"d", e("files", "top/a", "other", "b"), "", nil},
		{"other", e("ip", "1", "path", "/login"), "", nil},
	} {
		p, order, ok := set.MatchBucket(c.domain, c.entries)
		switch {
		case c.want == "" && ok:
			t.Errorf("%s %v: matched %s, want none", c.domain, c.entries, p.Name)
		case c.want != "" && (!ok || p.Name != c.want):
			t.Errorf("%s %v: matched %v, want %s", c.domain, c.entries, ok, c.want)
		case ok && len(order) != len(c.order):
			t.Errorf("%s %v: order %v, want %v", c.domain, c.entries, order, c.order)
		case ok:
			for i := range order {
				if order[i] != c.order[i] {
					t.Errorf("%s %v: order %v, want %v", c.domain, c.entries, order, c.order)
				}
			}
		}
	}
}
