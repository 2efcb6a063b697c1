package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestDrainDeadline: requests still waiting in a queue when the drain
// budget runs out are answered 503 with Retry-After, not cut off, and
// serve returns soon after the budget.
func TestDrainDeadline(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	cfg, err := config.Parse("drain.toml", []byte(`
[server]
listen = "127.0.0.1:0"
shutdown_timeout = "300ms"
[admin]
listen = "127.0.0.1:0"
[log]
level = "error"
[[upstream]]
name = "up"
targets = ["`+up.URL+`"]
[[policy]]
name = "slow"
upstream = "up"
key = []
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "1/m"
  queue = 5
  max_wait = "1h"
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, "", cfg, io.Discard, ready) }()
	l := <-ready
	addr := l.Proxy.String()

	type result struct {
		status     int
		retryAfter string
	}
	results := make(chan result, 3)
	get := func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			results <- result{}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		results <- result{resp.StatusCode, resp.Header.Get("Retry-After")}
	}
	go get()
	if r := <-results; r.status != 200 {
		t.Fatalf("first request: %d", r.status)
	}
	go get()
	go get()
	// The two wait a minute and two minutes: stop once the queue's gauge
	// shows both.
	// (Polled: a real server's gauge, no event to wait on.)
	poll.For(t, 10*time.Second, func() bool {
		return strings.Contains(scrape(t, l.Admin.String()), `limitproxy_queue_depth{policy="slow"} 2`)
	}, "the two requests never queued")
	begin := time.Now()
	stop()
	for range 2 {
		select {
		case r := <-results:
			if r.status != 503 || r.retryAfter != "1" {
				t.Errorf("queued request at the drain deadline: %d, Retry-After %q; want 503, 1", r.status, r.retryAfter)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a queued request got no answer")
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return")
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("stopping took %v with a 300ms budget", took)
	}
}

func scrape(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestDrain starts the proxy, puts two requests in flight at a slow
// upstream and two in the leaky-bucket queue, then stops it as SIGTERM
// does: every one of them must be answered 200, new connections must be
// refused, and serve must return nil within the drain budget.
func TestDrain(t *testing.T) {
	t.Parallel()
	// The upstream holds every request until release is closed: the
	// requests are in flight when the stop comes, however slow the machine.
	arrived := make(chan struct{}, 8)
	release := make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	defer releaseAll()
	cfg, err := config.Load("../../../../testdata/policy/valid/all_algorithms.toml")
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	cfg.Upstreams[0].Targets = []*url.URL{target}
	cfg.Server.ShutdownTimeout = 20 * time.Second
	cfg.Admin.Listen = "127.0.0.1:0"

	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() { done <- serve(ctx, "", cfg, &syncWriter{w: &logs}, ready) }()
	l := <-ready
	addr := l.Proxy.String()

	var wg sync.WaitGroup
	statuses := make(chan int, 8)
	get := func(path string) {
		defer wg.Done()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			statuses <- 0
			return
		}
		resp.Body.Close()
		statuses <- resp.StatusCode
	}
	wg.Add(1)
	go get("/fw")
	for range 3 { // 4/s: these leave 0, 250, 500ms after the first
		wg.Add(1)
		go get("/lb")
	}
	// All four are in the proxy: two at the upstream, two queued (one
	// queued, if the machine was slow enough that the second /lb has left
	// already: its turn comes 250ms after the first, and the third's at
	// 500ms keeps one queued while the drain starts).
	admin := "http://" + l.Admin.String()
	poll.For(t, 10*time.Second, func() bool {
		resp, err := http.Get(admin + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), `limitproxy_queue_depth{policy="lb"} 2`+"\n") ||
			strings.Contains(string(b), `limitproxy_queue_depth{policy="lb"} 1`+"\n")
	}, "/metrics never showed a /lb request queued")
	for range 2 {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the two requests never reached the upstream")
		}
	}
	stop() // SIGTERM
	// The listener closes at once; the dial that fails shows it (bounded).
	// (Polled: a listener's closing shows from outside only as a refused dial.)
	refused := poll.Until(5*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	if !refused {
		t.Error("the proxy still accepts connections while draining")
	}
	releaseAll() // the upstream answers the requests in flight and those queued
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Errorf("a request admitted before the stop got %d", s)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return after draining")
	}
}
