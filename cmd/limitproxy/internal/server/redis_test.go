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
// The Redis queue is virtual: Redis gives each request its place on one
// schedule shared by the instances, 1/r apart, and the request waits the
// delay to it on its own instance's timer. A request can only leave late
// (a timer or a machine that stalls), and one that left late does not
// delay the next: on a loaded machine two may reach the upstream together.
// What the product promises is that none leaves before its place: arrival
// k (in order) no sooner than k intervals after the first request was
// sent, as the schedule starts no sooner than that. The tolerance is for
// the clocks only: Redis's, in whole microseconds, against the instances'
// monotonic one, which NTP may slew by 500 ppm (under a millisecond over
// the run): 5ms. The last of the 24 arrivals is then held to 1150ms, where
// a rate 1.5 times too fast puts it near 767ms and instances that did not
// share the queue near 350ms. The exact spacing is pinned on a fake clock
// by limitertest's leaky-queue suite.
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

	sent := time.Now()
	statuses := drive("/lb", 2) // 24 requests, queued across the instances
	mu.Lock()
	arrivals := append([]time.Time(nil), seen["/lb"]...)
	mu.Unlock()
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
	if statuses[200] != 24 || len(arrivals) != 24 {
		t.Fatalf("leaky bucket: answers %v, %d arrivals; all 24 fit the queue", statuses, len(arrivals))
	}
	const interval, clocks = 50 * time.Millisecond, 5 * time.Millisecond
	for k, at := range arrivals {
		place := time.Duration(k) * interval
		if since := at.Sub(sent); since < place-clocks {
			t.Errorf("arrival %d came %v after the first request was sent, before its place in the shared schedule, %v: the rate allows one per 50ms",
				k, since.Round(time.Millisecond), place)
		}
	}
}
