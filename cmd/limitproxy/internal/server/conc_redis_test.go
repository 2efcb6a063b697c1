package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/internal/redistest"
)

// TestInstancesShareConcurrency: three instances on one Redis share a
// policy's [policy.concurrency] (limit 3 per client, no queue): 24
// concurrent requests of one client spread over them never hold more than
// 3 at the upstream at once, the others get 429 at once, and once the
// held ones end the slots are free again on every instance.
func TestInstancesShareConcurrency(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	release := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	t.Cleanup(done)
	var now, peak, reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		reached.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if r.URL.Path == "/hold" {
			<-release
		}
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
[[policy]]
name = "conc"
upstream = "app"
key = ["header:X-Client"]
  [policy.concurrency]
  limit = 3
`, srv.Addr(), up.URL)
	var proxies []string
	for i := range 3 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("instance%d.toml", i))
		os.WriteFile(path, []byte(text), 0o644)
		l, _ := serveFile(t, path, &syncWriter{w: new(bytes.Buffer)})
		proxies = append(proxies, "http://"+l.Proxy.String())
	}
	get := func(p, path string) int {
		req, _ := http.NewRequest("GET", p+path, nil)
		req.Header.Set("X-Client", "one")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	var ok, rejected atomic.Int64
	for i := range 24 {
		wg.Go(func() {
			switch get(proxies[i%3], "/hold") {
			case 200:
				ok.Add(1)
			case 429:
				rejected.Add(1)
			}
		})
	}
	// The rejected answer at once; the three admitted wait at the upstream.
	if !poll.Until(10*time.Second, func() bool { return rejected.Load() >= 21 }) {
		t.Fatalf("%d rejected, %d at the upstream: want 21 and 3", rejected.Load(), reached.Load())
	}
	if r := reached.Load(); r != 3 {
		t.Fatalf("%d requests reached the upstream, want 3", r)
	}
	done()
	wg.Wait()
	if ok.Load() != 3 || peak.Load() != 3 {
		t.Fatalf("%d admitted, %d at once; want 3 and 3", ok.Load(), peak.Load())
	}
	for _, p := range proxies {
		if code := get(p, "/free"); code != 200 {
			t.Fatalf("after the held requests ended: %d from %s, want 200", code, p)
		}
	}
}
