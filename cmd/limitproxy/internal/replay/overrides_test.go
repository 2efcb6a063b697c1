package replay

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// TestReplayOverrides: -overrides applies per-key overrides as the proxy
// does, read from an overrides file (which is left as it was) or from
// the admin API's listing. burst.log under per-ip.toml (2/s, burst 5;
// see TestReplayBurst) with 203.0.113.66 given per-ip-5.toml's limits
// (5/s, burst 10): that key is admitted 105 times and rejected 185
// instead of 43 and 247; the others as before (163 admitted, 17
// rejected).
func TestReplayOverrides(t *testing.T) {
	cfg, err := config.Load("testdata/per-ip.toml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	key, err := proxy.KeyFor(set.Policies[0], &cfg.Server, []string{"203.0.113.66"})
	if err != nil {
		t.Fatal(err)
	}
	o := perkey.Override{Policy: "per-ip", Key: proxy.StoreKey(key), Note: "test",
		Limits: []perkey.LimitSpec{{Algorithm: limiter.TokenBucket, Rate: limiter.Rate{N: 5, Per: time.Second}, Burst: 10}}}

	dir := t.TempDir()
	file := filepath.Join(dir, "overrides.jsonl")
	s, err := memstore.NewOverrides(memstore.OverrideOptions{Path: file})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	s.Close()
	before, _ := os.ReadFile(file)

	b, _ := o.MarshalJSON()
	var view map[string]any
	json.Unmarshal(b, &view)
	view["orphaned"] = false
	listing, _ := json.Marshal(map[string]any{"overrides": []any{view}})
	api := filepath.Join(dir, "overrides.json")
	os.WriteFile(api, listing, 0o600)

	for _, c := range []struct {
		name, path         string
		admitted, rejected int64
	}{
		{"none", "", 206, 264},
		{"overrides file", file, 268, 202},
		{"admin listing", api, 268, 202},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Run(context.Background(), Options{Config: "testdata/per-ip.toml", Overrides: c.path,
				Logs: []string{"testdata/burst.log"}, RawKeys: true})
			if err != nil {
				t.Fatal(err)
			}
			r := rep.Policies[0].Results[0]
			if r.Allowed != c.admitted || r.Rejected != c.rejected {
				t.Errorf("allowed %d, rejected %d; want %d, %d", r.Allowed, r.Rejected, c.admitted, c.rejected)
			}
		})
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Errorf("the overrides file changed:\n%s\nwas\n%s", after, before)
	}
	for _, bad := range []string{filepath.Join(dir, "none"), "testdata/per-ip.toml"} {
		if _, err := Run(context.Background(), Options{Config: "testdata/per-ip.toml", Overrides: bad, Logs: []string{"testdata/burst.log"}}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("-overrides %s: %v, want an error naming it", bad, err)
		}
	}
}
