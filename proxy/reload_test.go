package proxy

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestSwapKeepsCounters: docs/configuration.md's counter rules through the handler, with
// an injected clock. Every Set is compiled against the same store, as a
// reload does.
func TestSwapKeepsCounters(t *testing.T) {
	up := newUpstream(t, nil)
	target, _ := url.Parse(up.URL)
	store := memstore.New(memstore.Options{})
	clock := newClock()
	compile := func(limits string) *policy.Set {
		t.Helper()
		cfg, err := config.Parse("swap.toml", []byte(`
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9"]
[[policy]]
name = "api"
upstream = "app"
`+limits))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Upstreams[0].Targets = []*url.URL{target}
		set, err := policy.Compile(cfg, store, clock.now())
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	bucket := func(burst int) string {
		return strings.ReplaceAll(`  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/m"
  burst = BURST
`, "BURST", strconv.Itoa(burst))
	}
	h := New(compile(bucket(3)), Options{Now: clock.now})
	status := func() (int, string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/x", nil)
		h.ServeHTTP(w, r)
		return w.Code, w.Header().Get("RateLimit")
	}
	for range 3 {
		status()
	}
	if s, _ := status(); s != 429 {
		t.Fatalf("drained: %d", s)
	}
	// Unrelated change: a reject body. Still drained.
	h.Swap(compile(bucket(3) + "  [policy.reject]\n  body = \"slow down\"\n"))
	if s, _ := status(); s != 429 {
		t.Fatalf("after an unrelated change: %d, the bucket was reset", s)
	}
	// Raise the burst: still empty now, but it refills to the new burst.
	h.Swap(compile(bucket(10)))
	if s, _ := status(); s != 429 {
		t.Fatalf("raised burst: %d, want still empty", s)
	}
	clock.advance(time.Hour)
	admitted := 0
	for range 12 {
		if s, _ := status(); s == 200 {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("an hour after raising the burst to 10: %d admitted, want 10", admitted)
	}
	// Change the algorithm: a fresh limit.
	h.Swap(compile(`  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "1h"
`))
	if s, rl := status(); s != 200 || !strings.Contains(rl, "r=1") {
		t.Errorf("new algorithm: %d %q, want a fresh window", s, rl)
	}
}
