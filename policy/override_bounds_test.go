package policy

import (
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestOverrideWindowLimitBound: an override's fixed window has the bound
// of its policy's path, as in the file: 1,000,000,000, or 4294967295 in
// an RLS policy.
func TestOverrideWindowLimitBound(t *testing.T) {
	src := "[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n" +
		"[[policy]]\nname = \"rls\"\nmatch = { rls_domain = \"d\", descriptor = [\"k\"] }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n" +
		"[[policy]]\nname = \"http\"\nupstream = \"up\"\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 1\n  window = \"1m\"\n"
	cfg, err := config.Parse("o.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	set, err := Compile(cfg, store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Policy{}
	for _, p := range set.Policies {
		byName[p.Name] = p
	}
	window := func(n int64) perkey.Override {
		return perkey.Override{Limits: []perkey.LimitSpec{{Algorithm: limiter.FixedWindow, Limit: n, Window: time.Minute}}}
	}
	for _, c := range []struct {
		policy string
		limit  int64
		ok     bool
	}{
		{"http", limiter.MaxCount, true}, {"http", limiter.MaxCount + 1, false},
		{"rls", config.MaxRLSLimit, true}, {"rls", config.MaxRLSLimit + 1, false},
	} {
		if _, err := byName[c.policy].OverrideLimiter(store, window(c.limit)); (err == nil) != c.ok {
			t.Errorf("%s, fixed window of %d: %v", c.policy, c.limit, err)
		}
	}
}
