package proxy

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestSharedLimit: two policies using one [[shared_limit]] draw from one
// budget per client, like two nginx locations with one zone; another
// client has its own.
func TestSharedLimit(t *testing.T) {
	e := start(t, "nginx_zones.toml", newUpstream(t, nil), newClock(), nil)
	for i, path := range []string{"/", "/status", "/other", "/status"} {
		resp := e.get(t, path, "X-Forwarded-For", "203.0.113.1")
		want := http.StatusOK
		if i == 3 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d (%s): %d, want %d", i, path, resp.StatusCode, want)
		}
	}
	if resp := e.get(t, "/status", "X-Forwarded-For", "203.0.113.2"); resp.StatusCode != http.StatusOK {
		t.Fatalf("another client: %d", resp.StatusCode)
	}
	// One minute later one token is back, for either path.
	e.clock.advance(time.Minute)
	if resp := e.get(t, "/status", "X-Forwarded-For", "203.0.113.1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a minute: %d", resp.StatusCode)
	}
	if resp := e.get(t, "/", "X-Forwarded-For", "203.0.113.1"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request after a minute: %d, want 429", resp.StatusCode)
	}
}

// TestKeyPerLimit: a policy limited per address and per API key at once.
// An API key is spent from any address; a request without one counts only
// per address (on_missing = "skip" on the API-key limit); an address's
// limit binds whatever keys it rotates through; a repeated key header
// counts under its first value.
func TestKeyPerLimit(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, "nginx_zones.toml", up, newClock(), nil)
	get := func(ip, apiKey string) int {
		t.Helper()
		if apiKey == "" {
			return e.get(t, "/api/x", "X-Forwarded-For", ip).StatusCode
		}
		return e.get(t, "/api/x", "X-Forwarded-For", ip, "X-Api-Key", apiKey).StatusCode
	}
	// key A from four addresses: 4 pass, the 5th (a fifth address) is 429.
	for i := range 4 {
		if code := get("198.51.100."+string(rune('1'+i)), "A"); code != 200 {
			t.Fatalf("key A request %d: %d", i, code)
		}
	}
	resp := e.get(t, "/api/x", "X-Forwarded-For", "198.51.100.9", "X-Api-Key", "A")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("5th request of key A: %d, want 429", resp.StatusCode)
	}
	if rl := sfItem(t, resp.Header, "RateLimit", "per-key"); rl["r"] != 0 {
		t.Errorf("RateLimit of the key limit: %v", rl)
	}
	// Without a key: only the address counts (10 a minute).
	for i := range 10 {
		if code := get("192.0.2.1", ""); code != 200 {
			t.Fatalf("keyless request %d: %d", i, code)
		}
	}
	if code := get("192.0.2.1", ""); code != http.StatusTooManyRequests {
		t.Fatalf("11th keyless request: %d, want 429", code)
	}
	// Rotating keys from one address: the address's 10 bind.
	passed := 0
	for i := range 15 {
		if get("192.0.2.2", "rot"+string(rune('a'+i))) == 200 {
			passed++
		}
	}
	if passed != 10 {
		t.Errorf("rotating keys from one address: %d passed, want the address's 10", passed)
	}
	// The rejected key-A request took nothing from 198.51.100.9's budget.
	for i := range 10 {
		if code := get("198.51.100.9", ""); code != 200 {
			t.Fatalf("198.51.100.9 keyless request %d: %d", i, code)
		}
	}
}

// TestTwoStageDelay is nginx's limit_req burst=4 delay=2 at 10r/s through
// the proxy, in real time: of 7 concurrent requests, 3 are forwarded at
// once (the first and the 2 of the delay), 2 are queued and released
// 100ms apart after them, and 2 are rejected at once. (A plain leaky
// bucket with queue 2 would pass 3; with queue 4, 5 but the last 400ms
// late.) The limiter decides on a clock held still, so that the 7
// arrivals are one burst however a loaded machine spreads them; the
// queued ones wait in real time.
func TestTwoStageDelay(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	e := start(t, "nginx_zones.toml", up, newClock(), nil)
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
	)
	for range 7 {
		wg.Go(func() {
			resp := e.get(t, "/slow/x")
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[200] != 5 || codes[429] != 2 {
		t.Fatalf("statuses %v, want 5 × 200 and 2 × 429", codes)
	}
	// The 5th is released 200ms after the first decision, which the first
	// arrival follows by at most its own trip: a lower bound that holds on
	// a loaded machine, and an upper one a generous 2s away.
	seen := up.seen()
	first, last := seen[0].at, seen[0].at
	for _, a := range seen {
		if a.at.Before(first) {
			first = a.at
		}
		if a.at.After(last) {
			last = a.at
		}
	}
	if d := last.Sub(first); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("arrivals spread over %v, want about 200ms", d)
	}
}

// TestKeyPerLimitRaw: a limit's own key header, repeated or listed with
// junk over a raw socket, counts under its first value, and the upstream
// receives that one value only — as for the policy's own key.
func TestKeyPerLimitRaw(t *testing.T) {
	e := startRaw(t, func(c *config.Config) {
		for i := range c.Policies {
			p := &c.Policies[i]
			if p.Name != "default" {
				continue
			}
			// The catch-all policy gets a second limit: 2 an hour per
			// X-Api-Key, skipped without one.
			lim, err := limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: 2, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			p.Limits = append(p.Limits, lim)
			p.LimitKeys = append(p.LimitKeys, config.LimitKey{Parts: []config.KeyPart{{Kind: config.KeyHeader, Name: "X-Api-Key"}}, OnMissing: config.MissingSkip})
			p.OwnKeys = true
		}
	})
	e.realkeyWithJunk(t, "/other", 9, 2)
	// Without the header the limit is skipped: the policy's own still counts.
	if st, _ := e.do(t, "GET /other HTTP/1.1"); st != 200 {
		t.Errorf("without a key: %d, want 200", st)
	}
}
