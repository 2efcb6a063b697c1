package livelog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/config"
	"github.com/limitproxy/limitproxy/internal/limiter/memstore"
	"github.com/limitproxy/limitproxy/internal/policy"
	"github.com/limitproxy/limitproxy/internal/proxy"
	"github.com/limitproxy/limitproxy/internal/replay/logread"
	"github.com/limitproxy/limitproxy/internal/server"
)

// replayConfig has a policy of each kind replay must reproduce: a count
// limit with a ban, a header-matched and header-keyed token bucket, a
// shared leaky-bucket queue, a shadow policy and a sliding window per
// address, behind a trusted proxy (the client address comes from
// X-Forwarded-For).
const replayConfig = `
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]
[admin]
listen = ""
[log]
level = "info"
access_replay = true
[[upstream]]
name = "up"
targets = ["UPSTREAM"]
[[policy]]
name = "login"
upstream = "up"
match = { methods = ["POST"], path = "/login" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "1m"
  count = { status = [401] }
  [policy.ban]
  duration = "1m"
  status = 403
[[policy]]
name = "api"
upstream = "up"
key = ["header:X-API-Key"]
match = { path_prefix = "/api/", headers = { "X-API-Key" = "*" } }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "5/s"
  burst = 3
[[policy]]
name = "queue"
upstream = "up"
key = []
match = { path = "/queue" }
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "20/s"
  queue = 3
[[policy]]
name = "shadow"
upstream = "up"
mode = "shadow"
match = { path_prefix = "/s/" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "1m"
[[policy]]
name = "rest"
upstream = "up"
  [[policy.limits]]
  algorithm = "sliding_window"
  limit = 5
  window = "1s"
`

// TestRecordThenReplay: limitproxy serves traffic of many clients at once
// with [log] access_replay; its access log, run through proxy.Evaluator
// with the same configuration on a virtual clock (arrivals at received,
// answers settled when they ended), reproduces every decision exactly:
// allowed, queued, rejected, banned, shadow_rejected, per request.
func TestRecordThenReplay(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" && r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	src := strings.ReplaceAll(replayConfig, "UPSTREAM", up.URL)
	cfg, err := config.Parse("replay.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	srv, err := server.New(cfg, server.Options{Stderr: stderr, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var addr string
	select {
	case a := <-srv.Ready():
		addr = "http://" + a.Proxy.String()
	case err := <-done:
		stop()
		t.Fatalf("server: %v", err)
	}
	get := func(method, path string, header ...string) {
		req, _ := http.NewRequest(method, addr+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Each key's requests one after another, the keys at once.
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			ip := fmt.Sprintf("10.0.1.%d", i+1)
			for j := range 6 {
				password := "wrong"
				if i == 0 && j == 1 {
					password = "right"
				}
				get("POST", "/login", "X-Forwarded-For", ip, "X-Password", password)
			}
		})
	}
	for i := range 3 {
		wg.Go(func() {
			for range 8 {
				get("GET", fmt.Sprintf("/api/v%d", i), "X-API-Key", fmt.Sprintf("k%d", i), "X-Forwarded-For", "10.0.2.1")
			}
		})
	}
	wg.Go(func() {
		for range 4 {
			get("GET", "/s/x", "X-Forwarded-For", "10.0.3.1")
		}
	})
	// The queue's requests 15 ms apart without waiting for their answers,
	// against one release every 50 ms: it fills, then refuses. (Not one
	// after another: each would arrive just as the one before left, where
	// the memory store's real queue, released by timers that fire late,
	// and a replay's schedule may differ by those timers' lateness.)
	for i := range 8 {
		time.Sleep(15 * time.Millisecond)
		wg.Go(func() { get("GET", fmt.Sprintf("/queue?n=%d", i), "X-Forwarded-For", "10.0.3.1") })
	}
	for i := range 2 {
		wg.Go(func() {
			for range 8 {
				get("GET", "/other", "X-Forwarded-For", fmt.Sprintf("10.0.4.%d", i+1))
			}
		})
	}
	wg.Wait()
	stop()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	stderr.mu.Lock()
	log := bytes.Clone(stderr.b.Bytes())
	stderr.mu.Unlock()

	r, err := logread.NewReader(bytes.NewReader(log), "replay.log", logread.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []logread.Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if len(recs) != 6*6+3*8+4+8+2*8 {
		t.Fatalf("%d access lines, want %d", len(recs), 6*6+3*8+4+8+2*8)
	}
	// Replay: arrivals at received, answers when they ended, in time
	// order (an answer before an arrival at the same instant).
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{VirtualQueues: true}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev := proxy.NewEvaluator(set, memstore.NewBans(memstore.BanOptions{}))
	type event struct {
		at     time.Time
		answer bool
		i      int
	}
	var events []event
	for i, rec := range recs {
		events = append(events, event{rec.Time, false, i}, event{rec.End, true, i})
	}
	slices.SortStableFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		if a.answer != b.answer {
			if a.answer {
				return -1
			}
			return 1
		}
		return 0
	})
	verdicts := make([]proxy.Verdict, len(recs))
	decided := map[string]int{}
	for _, e := range events {
		rec := recs[e.i]
		if e.answer {
			if v := verdicts[e.i]; v.Status == 0 {
				ev.Answer(v, rec.Status, -1, rec.End)
			}
			continue
		}
		req := &http.Request{Method: rec.Method, Host: rec.Host, URL: &url.URL{Path: rec.Path, RawQuery: rec.RawQuery},
			Header: http.Header{}, RemoteAddr: netip.AddrPortFrom(rec.Client, 0).String(), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		for _, h := range rec.Header {
			req.Header.Add(h.Name, h.Value)
		}
		v := ev.Evaluate(req, rec.Time)
		verdicts[e.i] = v
		decided[rec.Decision]++
		if v.Policy != rec.Policy || v.Decision != rec.Decision {
			t.Errorf("%s %s from %v at %s: replayed %s/%s, the proxy decided %s/%s", rec.Method, rec.Path, rec.Client,
				rec.Time.Format(time.RFC3339Nano), v.Policy, v.Decision, rec.Policy, rec.Decision)
		}
	}
	t.Logf("decisions reproduced: %v", decided)
	for _, want := range []string{"allowed", "rejected", "banned", "queued", "shadow_rejected"} {
		if decided[want] == 0 {
			t.Errorf("no %s request in the traffic: the test does not cover it", want)
		}
	}
}
