package replay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/server"
	"github.com/limitproxy/limitproxy/policy/config"
)

// record runs a real limitproxy with cfgText (UPSTREAM replaced by up's
// address) in front of up, lets traffic send requests to it over
// loopback, stops it, and returns the config's path and the access log's
// path.
func record(t *testing.T, cfgText string, up http.Handler, traffic func(addr string)) (string, string) {
	t.Helper()
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "recorded.toml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(cfgText, "UPSTREAM", upSrv.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	srv, err := server.New(cfg, server.Options{Path: cfgPath, Stderr: stderr, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case a := <-srv.Ready():
		traffic("http://" + a.Proxy.String())
	case err := <-done:
		stop()
		t.Fatalf("server: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	logPath := filepath.Join(dir, "access.log")
	stderr.mu.Lock()
	err = os.WriteFile(logPath, stderr.b.Bytes(), 0o644)
	stderr.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return cfgPath, logPath
}

// okUpstream answers every request "ok".
var okUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// recordConfig has a policy of each kind a replay must reproduce: a count
// limit with a ban (settled when answers end), a header-matched and
// header-keyed token bucket, a shared leaky-bucket queue, a shadow policy
// and a sliding window per address, behind a trusted proxy (the client
// address comes from X-Forwarded-For).
const recordConfig = `
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
  queue = 10
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

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestRecordThenReplay: a real limitproxy serves many clients at once
// with [log] access_replay; `limitproxy replay` of its access log against
// the configuration it ran with agrees with every decision it logged.
func TestRecordThenReplay(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" && r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "ok")
	})
	cfgPath, logPath := record(t, recordConfig, up, func(addr string) { recordTraffic(t, addr) })
	rep, err := Run(context.Background(), Options{Config: cfgPath, Logs: []string{logPath}, RawKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	const requests = 6*6 + 3*8 + 4 + 8 + 2*8
	if rep.Read.Replayed != requests || rep.Read.NoClient != 0 || rep.Read.Malformed != 0 {
		t.Errorf("Read = %+v, want %d requests replayed, each with its client", rep.Read, requests)
	}
	if len(rep.Logged) != 1 || rep.Logged[0].Compared != requests || rep.Logged[0].Agreed != requests {
		t.Errorf("Logged = %+v, want all %d decisions reproduced", rep.Logged, requests)
	}
	decided := Counts{}
	for _, p := range rep.Policies {
		c := p.Results[0].Counts
		decided.Allowed += c.Allowed
		decided.Queued += c.Queued
		decided.Rejected += c.Rejected
		decided.Banned += c.Banned
		decided.ShadowRejected += c.ShadowRejected
	}
	if decided.Allowed == 0 || decided.Queued == 0 || decided.Rejected == 0 || decided.Banned == 0 || decided.ShadowRejected == 0 {
		t.Errorf("decisions %+v: the traffic should have each of allowed, queued, rejected, banned, shadow_rejected", decided)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("report:\n%s", text.String())
}

// recordTraffic is TestRecordThenReplay's traffic: each key's requests
// one after another, the keys at once.
func recordTraffic(t *testing.T, addr string) {
	send := func(method, path string, header ...string) {
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
			for j := range 6 {
				password := "wrong"
				if i == 0 && j == 1 {
					password = "right"
				}
				send("POST", "/login", "X-Forwarded-For", fmt.Sprintf("10.0.1.%d", i+1), "X-Password", password)
			}
		})
	}
	for i := range 3 {
		wg.Go(func() {
			for range 8 {
				send("GET", fmt.Sprintf("/api/v%d", i), "X-API-Key", fmt.Sprintf("k%d", i), "X-Forwarded-For", "10.0.2.1")
			}
		})
	}
	wg.Go(func() {
		for range 4 {
			send("GET", "/s/x", "X-Forwarded-For", "10.0.3.1")
		}
	})
	// The queue's requests 15 ms apart, not waiting for their answers,
	// against a release every 50 ms: the first goes, the others wait, and
	// the queue never fills. (Not one after another: each would arrive
	// just as the one before left, where the memory store's real queue,
	// released by timers that fire late, and a replay's schedule may
	// differ by the timers' lateness. And not up to a full queue: two
	// requests of one key arriving within a scheduler's hiccup of each
	// other, as on a loaded CI machine, may be decided in the other order
	// than their instants, and at a full queue that swaps which one is
	// refused: docs/replay.md.)
	for i := range 8 {
		time.Sleep(15 * time.Millisecond) // the arrivals' pace against the real queue's timers (above): the scenario, not a wait
		wg.Go(func() { send("GET", fmt.Sprintf("/queue?n=%d", i), "X-Forwarded-For", "10.0.3.1") })
	}
	for i := range 2 {
		wg.Go(func() {
			for range 8 {
				send("GET", "/other", "X-Forwarded-For", fmt.Sprintf("10.0.4.%d", i+1))
			}
		})
	}
	wg.Wait()
}
