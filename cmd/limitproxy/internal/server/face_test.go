package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/policy/config"
)

// everyFace is a configuration with every face that needs no
// certificate on loopback (the proxy, admin, forward auth, the RLS) and
// shutdown_timeout budget. The proxy forwards everything but /fa/ to up;
// /fa/ (forward auth's) and the RLS's descriptor "alg=lb" are leaky
// buckets of rate, one at once and the next queued.
func everyFace(t *testing.T, up, budget, rate string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("faces.toml", []byte(fmt.Sprintf(`
[server]
listen = "127.0.0.1:0"
shutdown_timeout = %q
[admin]
listen = "127.0.0.1:0"
[log]
level = "error"
[forward_auth]
listen = "127.0.0.1:0"
trusted_senders = ["127.0.0.1/32"]
max_wait = "3h"
[rls]
listen = "127.0.0.1:0"
[[upstream]]
name = "up"
targets = [%q]
[[policy]]
name = "fa"
upstream = "up"
match = { path_prefix = "/fa/" }
key = []
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = %[3]q
  queue = 2
[[policy]]
name = "lb"
match = { rls_domain = "edge", descriptor = ["alg=lb"] }
key = []
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = %[3]q
  queue = 2
[[policy]]
name = "rest"
upstream = "up"
key = []
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000/s"
`, budget, up, rate)))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startFaces runs a server for cfg until the test ends, returning its
// addresses once it accepts, a function that stops it as SIGTERM does,
// the channel serve's result comes on, and its logs.
func startFaces(t *testing.T, cfg *config.Config) (l listening, stop func(), done <-chan error, logs *syncWriter) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	ready := make(chan listening, 1)
	served := make(chan error, 1)
	logs = &syncWriter{w: new(bytes.Buffer)}
	go func() { served <- serve(ctx, "", cfg, logs, ready) }()
	select {
	case l = <-ready:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}
	return l, stop, served, logs
}

// answer is an HTTP exchange's outcome: status 0 for none.
type answer struct {
	status     int
	retryAfter string
}

// getAsync sends GET url and returns the channel its answer comes on.
func getAsync(url string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			out <- answer{}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
	}()
	return out
}

// lbCall is an RLS call of the descriptor "alg=lb".
var lbCall = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("alg=lb")}}

// rlsClient returns a client of the RLS at addr, asserting that a first
// call of lbCall is OK.
func rlsClient(t *testing.T, addr net.Addr) rlsv3.RateLimitServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c := rlsv3.NewRateLimitServiceClient(cc)
	if resp, err := ask(t, c, lbCall); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the RLS's first call: %v %v", resp, err)
	}
	return c
}

// callAsync calls lbCall and returns the channel its gRPC code comes on
// (an answer other than OK: Unknown).
func callAsync(c rlsv3.RateLimitServiceClient) <-chan codes.Code {
	out := make(chan codes.Code, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, lbCall)
		if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
			err = fmt.Errorf("%v", resp.OverallCode)
		}
		out <- grpcstatus.Code(err)
	}()
	return out
}

// waitQueued waits until the queue gauges of the server whose admin API
// is at admin show fa and lb exchanges waiting in "fa" and "lb".
// (Polled: a real server's gauges, no event to wait on.)
func waitQueued(t *testing.T, admin net.Addr, fa, lb int) {
	t.Helper()
	poll.For(t, 10*time.Second, func() bool {
		m := scrape(t, admin.String())
		return strings.Contains(m, fmt.Sprintf("limitproxy_queue_depth{policy=%q} %d\n", "fa", fa)) &&
			strings.Contains(m, fmt.Sprintf("limitproxy_queue_depth{policy=%q} %d\n", "lb", lb))
	}, "the exchanges never queued")
}

// refused reports whether dialing addr is refused within 5 s: its
// listener is closed. (Polled: a listener's closing shows from outside
// only as a refused dial.)
func refused(addr net.Addr) bool {
	return poll.Until(5*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr.String(), time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
}

// TestStopEveryFace: a stop drains every data face the same way, within
// the one budget. With an exchange in flight on each (a proxied request
// at an upstream that holds it, a forward-auth request and an RLS call
// waiting their turn in a leaky bucket's queue), the proxy, forward auth
// and the RLS stop accepting at once while the admin API still answers;
// each exchange then completes (200, 200, OK), serve returns nil within
// the budget, and every listener is closed.
func TestStopEveryFace(t *testing.T) {
	t.Parallel()
	came := make(chan struct{}, 8)
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		came <- struct{}{}
		<-hold
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	defer release()
	l, stop, done, _ := startFaces(t, everyFace(t, up.URL, "30s", "1/4s"))

	// In flight on each data face: the proxied request at the upstream,
	// the second forward-auth request and RLS call in their queue, 4 s.
	proxied := getAsync("http://" + l.Proxy.String() + "/slow")
	fa := "http://" + l.ForwardAuth.String() + "/fa/x"
	if a := <-getAsync(fa); a.status != 200 {
		t.Fatalf("forward auth's first request: %d", a.status)
	}
	authed := getAsync(fa)
	called := callAsync(rlsClient(t, l.RLS))
	select {
	case <-came:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxied request never reached the upstream")
	}
	waitQueued(t, l.Admin, 1, 1)

	begin := time.Now()
	stop()
	for name, addr := range map[string]net.Addr{"proxy": l.Proxy, "forward_auth": l.ForwardAuth, "rls": l.RLS} {
		if !refused(addr) {
			t.Errorf("%s still accepts connections while draining", name)
		}
	}
	// The upstream holds the proxied request: the drain is under way.
	if resp, err := http.Get("http://" + l.Admin.String() + "/healthz"); err != nil {
		t.Errorf("the admin API during the drain: %v", err)
	} else {
		resp.Body.Close()
	}
	select {
	case a := <-authed:
		t.Fatalf("forward auth's queued request was answered (%d) at the stop, not drained; a machine too slow for the test's 4 s?", a.status)
	case c := <-called:
		t.Fatalf("the RLS's queued call was answered (%v) at the stop, not drained; a machine too slow for the test's 4 s?", c)
	default:
	}
	release()
	for what, got := range map[string]<-chan answer{"the proxied request": proxied, "forward auth's request": authed} {
		select {
		case a := <-got:
			if a.status != 200 {
				t.Errorf("%s in flight at the stop: %d, want 200", what, a.status)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s in flight at the stop got no answer", what)
		}
	}
	select {
	case c := <-called:
		if c != codes.OK {
			t.Errorf("the RLS call in flight at the stop: %v, want OK", c)
		}
	case <-time.After(20 * time.Second):
		t.Error("the RLS call in flight at the stop got no answer")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within the budget")
	}
	if took := time.Since(begin); took > 20*time.Second {
		t.Errorf("stopping took %v; the exchanges needed about 4 s", took)
	}
	for name, addr := range map[string]net.Addr{"proxy": l.Proxy, "admin": l.Admin, "forward_auth": l.ForwardAuth, "rls": l.RLS} {
		if !refused(addr) {
			t.Errorf("%s still accepts connections after the stop", name)
		}
	}
}

// TestStopEveryFaceDeadline: when the budget runs out, what still waits
// in a queue on any data face is answered, not cut off: the proxy's and
// forward auth's requests 503 with Retry-After: 1, the RLS's call
// UNAVAILABLE; serve returns soon after the budget, and the log names
// the faces that overran it.
func TestStopEveryFaceDeadline(t *testing.T) {
	t.Parallel()
	cfg := everyFace(t, "http://127.0.0.1:1", "300ms", "1/h")
	cfg.Log.Level = config.LevelWarn
	l, stop, done, logs := startFaces(t, cfg)
	fa := "http://" + l.ForwardAuth.String() + "/fa/x"
	if a := <-getAsync(fa); a.status != 200 {
		t.Fatalf("forward auth's first request: %d", a.status)
	}
	// "fa" decides /fa/ on the proxy too: its queue holds both.
	authed := getAsync(fa)
	proxied := getAsync("http://" + l.Proxy.String() + "/fa/y")
	called := callAsync(rlsClient(t, l.RLS))
	waitQueued(t, l.Admin, 2, 1)

	begin := time.Now()
	stop()
	for what, got := range map[string]<-chan answer{"the proxied request": proxied, "forward auth's request": authed} {
		select {
		case a := <-got:
			if a.status != 503 || a.retryAfter != "1" {
				t.Errorf("%s queued at the drain deadline: %d, Retry-After %q; want 503, 1", what, a.status, a.retryAfter)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s queued got no answer", what)
		}
	}
	select {
	case c := <-called:
		if c != codes.Unavailable {
			t.Errorf("the RLS call queued at the drain deadline: %v, want Unavailable", c)
		}
	case <-time.After(10 * time.Second):
		t.Error("the RLS call queued got no answer")
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
	if want := `"faces":["proxy","forward_auth","rls"]`; !strings.Contains(logs.String(), want) {
		t.Errorf("the drain's warning does not name the faces (%s):\n%s", want, logs)
	}
}

// TestFaceServeFails: when any face's accept loop fails (its listener
// closed under it, here), the process stops as on a stop signal, every
// other listener closed, and serve returns the error, naming the face.
func TestFaceServeFails(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"proxy", "admin", "forward_auth", "rls"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := everyFace(t, "http://127.0.0.1:1", "30s", "1/s")
			var proc *process
			ready := make(chan listening, 1)
			done := make(chan error, 1)
			go func() {
				done <- serve(context.Background(), "", cfg, io.Discard, ready, func(p *process) { proc = p })
			}()
			var l listening
			select {
			case l = <-ready:
			case err := <-done:
				t.Fatalf("serve: %v", err)
			}
			for _, f := range proc.faces {
				if f.name == name {
					f.ln.Close()
				}
			}
			select {
			case err := <-done:
				if want := "serve: " + name + ": "; err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, net.ErrClosed) {
					t.Errorf("serve: %v; want %q and net.ErrClosed", err, want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not return after a face failed")
			}
			for other, addr := range map[string]net.Addr{"proxy": l.Proxy, "admin": l.Admin, "forward_auth": l.ForwardAuth, "rls": l.RLS} {
				if !refused(addr) {
					t.Errorf("%s still accepts connections", other)
				}
			}
		})
	}
}
