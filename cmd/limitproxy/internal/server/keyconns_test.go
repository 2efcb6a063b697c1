package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestConcurrencyCountsLeakyQueue: a policy whose leaky bucket may queue
// 50 requests of a key, and whose [policy.concurrency] allows one key 2
// at once: one client opening 20 connections at once may hold 2 of them
// in the proxy; the other 18 are answered 429 at once, not kept open in
// the queue (where each would hold a file descriptor for up to 50
// intervals).
func TestConcurrencyCountsLeakyQueue(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "error"
[[upstream]]
name = "up"
targets = [%q]
[[policy]]
name = "q"
upstream = "up"
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "6/1m"
  queue = 50
  [policy.concurrency]
  limit = 2
  max_wait = "0s"
`, up.URL)
	addr := startServer(t, "keyconns.toml", src).Proxy.String()
	const n = 20
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			// Each on its own connection; the client gives up after 3 s
			// (the queue's interval is 10 s).
			c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := c.Get("http://" + addr + "/")
			if err != nil {
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	// One forwarded at once, one queued (held), 18 refused; a generous
	// margin for the order in which the 20 arrive.
	if count[http.StatusTooManyRequests] < n-3 || count[0] > 2 {
		t.Errorf("answers %v (0: no answer within 3 s); want at least %d × 429 and at most 2 held", count, n-3)
	}
}
