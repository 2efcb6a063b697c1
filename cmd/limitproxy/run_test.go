package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/policy"
)

func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string // in stdout (code 0) or the error (else)
	}{
		{[]string{"check", "-config", "config.example.toml"}, 0, "ok: 4 policies, 5 limits, 1 upstreams"},
		{[]string{"check", "-config", "../../testdata/policy/invalid/cross_field.toml"}, 1, "cross_field.toml:11:1: policy[0].upstream: unknown upstream \"backend\""},
		{[]string{"check", "-config", "/nonexistent.toml"}, 1, "/nonexistent.toml: open /nonexistent.toml"},
		{[]string{"check"}, 2, "-config PATH is required"},
		{[]string{"-config"}, 2, "flag needs an argument"},
		{[]string{"-config", "x.toml", "extra"}, 2, "unexpected argument"},
		{[]string{"version"}, 0, "limitproxy dev (go1."},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), c.args, &stdout, &stderr)
		code := exitCode(err, &stderr)
		text := stdout.String()
		if err != nil {
			text = err.Error()
		}
		if code != c.code || !strings.Contains(text, c.out) {
			t.Errorf("limitproxy %s: exit %d, %q; want exit %d with %q", strings.Join(c.args, " "), code, text, c.code, c.out)
		}
	}
}

// TestDrain starts the proxy, puts one request in flight and three in the
// leaky-bucket queue, then stops it as SIGTERM does: every one of them must
// be answered 200, new connections must be refused, and serve must return
// nil within the drain budget.
func TestDrain(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // a slow upstream: requests are in flight
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	cfg, err := policy.Load("../../testdata/policy/valid/all_algorithms.toml")
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	cfg.Upstreams[0].Targets = []*url.URL{target}
	cfg.Server.ShutdownTimeout = 20 * time.Second

	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() { done <- serve(ctx, "", cfg, &syncWriter{w: &logs}, ready) }()
	addr := (<-ready).Proxy.String()

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
	time.Sleep(100 * time.Millisecond) // all four are in the proxy now
	stop()                             // SIGTERM
	time.Sleep(50 * time.Millisecond)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the proxy still accepts connections while draining")
	}
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

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
