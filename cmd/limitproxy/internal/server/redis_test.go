package server

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/redistest"
)

// TestInstancesShareRedis runs three limitproxy instances on one Redis and
// one configuration and drives them concurrently: the upstream they share
// must see exactly each limit, whichever instance a request went through,
// and leaky-bucket arrivals spaced by the rate across instances.
//
// Tolerance for the spacing: each instance holds a queued request for the
// delay Redis computed, then forwards it; its timer and the forwarding can
// only be late: on a 2-core machine shared at a load of 18, a stall of
// 150ms released four at once. A late arrival shortens the gap after it,
// never the span from an earlier one, so every pair i < j is held to (j−i)
// intervals minus that lateness, 200ms: the 23 intervals of the whole run
// to at least 950ms, where a rate 1.5 times too fast gives 767ms and
// instances that did not share the queue a third of 1150ms. The exact
// spacing is pinned on a fake clock by limitertest's leaky-queue suite.
func TestInstancesShareRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var mu sync.Mutex
	seen := map[string][]time.Time{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = append(seen[r.URL.Path], time.Now())
		mu.Unlock()
	}))
	defer up.Close()
	text := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "error"
access = false
[store]
backend = "redis"
[store.redis]
addrs = [%q]
timeout = "2s"
on_error = "deny"
[[upstream]]
name = "app"
targets = [%q]
`, srv.Addr(), up.URL)
	for _, p := range []string{
		`name = "tb"` + "\nupstream = \"app\"\nmatch = { path = \"/tb\" }\n  [[policy.limits]]\n  algorithm = \"token_bucket\"\n  rate = \"1/h\"\n  burst = 50\n",
		`name = "fw"` + "\nupstream = \"app\"\nmatch = { path = \"/fw\" }\n  [[policy.limits]]\n  algorithm = \"fixed_window\"\n  limit = 50\n  window = \"1h\"\n",
		`name = "sl"` + "\nupstream = \"app\"\nmatch = { path = \"/sl\" }\n  [[policy.limits]]\n  algorithm = \"sliding_log\"\n  limit = 50\n  window = \"1h\"\n",
		`name = "sw"` + "\nupstream = \"app\"\nmatch = { path = \"/sw\" }\n  [[policy.limits]]\n  algorithm = \"sliding_window\"\n  limit = 50\n  window = \"1h\"\n  slots = 6\n",
		`name = "lb"` + "\nupstream = \"app\"\nmatch = { path = \"/lb\" }\nkey = []\n  [[policy.limits]]\n  algorithm = \"leaky_bucket\"\n  rate = \"20/s\"\n  queue = 100\n  max_wait = \"10s\"\n",
	} {
		text += "[[policy]]\n" + p
	}
	var proxies []string
	for i := range 3 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("instance%d.toml", i))
		os.WriteFile(path, []byte(text), 0o644)
		l, _ := serveFile(t, path, &syncWriter{w: new(bytes.Buffer)})
		proxies = append(proxies, "http://"+l.Proxy.String())
	}

	drive := func(path string, perWorker int) map[int]int {
		statuses := map[int]int{}
		var smu sync.Mutex
		var wg sync.WaitGroup
		for _, p := range proxies {
			for range 4 {
				wg.Go(func() {
					for range perWorker {
						resp, err := http.Get(p + path)
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
						smu.Lock()
						statuses[resp.StatusCode]++
						smu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		return statuses
	}
	for _, path := range []string{"/tb", "/fw", "/sl", "/sw"} {
		statuses := drive(path, 40) // 3 instances × 4 clients × 40 = 480 requests
		mu.Lock()
		got := len(seen[path])
		mu.Unlock()
		if got != 50 || statuses[200] != 50 || statuses[429] != 430 {
			t.Errorf("%s: the upstream saw %d, answers %v; want exactly 50 through three instances", path, got, statuses)
		}
	}

	statuses := drive("/lb", 2) // 24 requests, queued across the instances
	mu.Lock()
	arrivals := append([]time.Time(nil), seen["/lb"]...)
	mu.Unlock()
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
	if statuses[200] != 24 || len(arrivals) != 24 {
		t.Fatalf("leaky bucket: answers %v, %d arrivals; all 24 fit the queue", statuses, len(arrivals))
	}
	const interval, late = 50 * time.Millisecond, 200 * time.Millisecond
	for i := range arrivals {
		for j := i + 1; j < len(arrivals); j++ {
			if span := arrivals[j].Sub(arrivals[i]); span < time.Duration(j-i)*interval-late {
				t.Errorf("arrivals %d and %d are %v apart across instances; the rate allows one per 50ms", i, j, span)
			}
		}
	}
}
