package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/limitproxy/limitproxy/internal/h1"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// The rejection written whole (recorder.writeWhole, the front's
// WriteWhole) matches net/http's bytes and the same rejection written
// through the map, whatever a client and an operator can vary.

// wholeVia is the server a wholeRig's proxy is served by.
type wholeVia int

const (
	viaFront    wholeVia = iota // the front: rejections written whole
	viaFrontMap                 // the front, WriteWhole hidden: rejections through WriteHeader
	viaNetHTTP                  // net/http alone
)

func (v wholeVia) String() string {
	return [...]string{"front", "front-map", "net/http"}[v]
}

// hideWhole hides the front's WriteWhole from the recorder (which looks
// for it on the writer it holds, not through Unwrap), and nothing else:
// deadlines and WatchClient are still reached through Unwrap.
type hideWhole struct{ http.ResponseWriter }

func (w hideWhole) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// lockedBuffer is an access log destination written from handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// wholeRig is a proxy served one way (wholeVia), with its access log and
// metrics.
type wholeRig struct {
	addr   string
	access *lockedBuffer
	reg    *prometheus.Registry
}

// wholeHasher is every rig's key hash, so that access lines compare.
var wholeHasher = NewKeyHasher([]byte("review-whole-key-hash-secret"))

// startWholeRig serves cfgText ("UP" standing for upstream's address),
// edited by edit, via via; opts, if not nil, adds to the handler's
// options once the set is compiled.
func startWholeRig(t *testing.T, via wholeVia, upstream, cfgText string, edit func(*config.Config), opts func(*Options, *policy.Set)) *wholeRig {
	t.Helper()
	cfg, err := config.Parse("review.toml", []byte(strings.ReplaceAll(cfgText, "UP", upstream)))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	rig := &wholeRig{access: &lockedBuffer{}, reg: prometheus.NewRegistry()}
	o := Options{
		AccessLog:    true,
		AccessLogger: zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel)),
		AccessJSON:   rig.access,
		Metrics:      NewMetrics(rig.reg),
		KeyHasher:    wholeHasher,
		Now:          func() time.Time { return t0 },
	}
	if opts != nil {
		opts(&o, set)
	}
	var handler http.Handler = New(set, o)
	if via == viaFrontMap {
		inner := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { inner.ServeHTTP(hideWhole{w}, r) })
	}
	rig.addr = serveFrontOrNetHTTP(t, handler, via != viaNetHTTP)
	return rig
}

// wholeCfg is one policy over a token bucket of burst 1 (the clock holds
// still: after the first request, every one is refused), trusted
// proxies on loopback (a client's X-Request-Id is taken).
const wholeCfg = `
[server]
trusted_proxies = ["127.0.0.1/32"]
[[upstream]]
name = "app"
targets = ["http://UP"]
timeout = "5s"
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  name = "LNAME"
  algorithm = "token_bucket"
  rate = "1/s"
  burst = 1
`

// wholeRequests are refused requests the front serves itself (and one it
// hands to net/http), pipelined ones included.
var wholeRequests = map[string]string{
	"get":        "GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"head":       "HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"close":      "GET /x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n",
	"head-close": "HEAD /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
	"cl0":        "GET /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	"id-max":     "GET /x HTTP/1.1\r\nHost: a\r\nX-Request-Id: " + strings.Repeat("q", maxRequestID) + "\r\n\r\n",
	"id-toolong": "GET /x HTTP/1.1\r\nHost: a\r\nX-Request-Id: " + strings.Repeat("q", maxRequestID+1) + "\r\n\r\n",
	"id-space":   "GET /x HTTP/1.1\r\nHost: a\r\nX-Request-Id: a b\r\n\r\n",
	"http10":     "GET /x HTTP/1.0\r\nHost: a\r\n\r\n",
	// Written whole, then handed to net/http (a body, Expect, HTTP/1.0)
	// on the same connection.
	"then-handed": "GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc" +
		"GET /c HTTP/1.1\r\nHost: a\r\n\r\nGET /d HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nHEAD /e HTTP/1.1\r\nHost: a\r\n\r\n",
	"pipelined": "HEAD /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\nX-Request-Id: id-b\r\n\r\n" +
		"HEAD /c HTTP/1.1\r\nHost: a\r\n\r\nGET /d HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /e HTTP/1.1\r\nHost: a\r\n\r\n",
}

// wholeBasic are the requests of wholeRequests every rig is sent: GET,
// HEAD, HEAD that closes, and a pipelined run of both.
func wholeBasic() map[string]string {
	m := map[string]string{}
	for _, name := range []string{"get", "head", "head-close", "pipelined"} {
		m[name] = wholeRequests[name]
	}
	return m
}

// primeWhole sends the one request the bucket lets through.
func primeWhole(t *testing.T, addr string) {
	t.Helper()
	if got := readAll(t, addr, "GET /first HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200 ") {
		t.Fatalf("first request: %q", got)
	}
}

// compareWhole sends each of reqs (sorted by name) to each rig, on a
// connection of its own, and reports where the bytes differ (the date
// and drawn ids aside) and where the answer is not a refusal of status.
func compareWhole(t *testing.T, rigs []*wholeRig, vias []wholeVia, reqs map[string]string, status int) {
	t.Helper()
	for _, name := range sortedKeys(reqs) {
		var first string
		for i, rig := range rigs {
			got := settled(readAll(t, rig.addr, reqs[name]))
			if i == 0 {
				first = got
				if !strings.HasPrefix(got, fmt.Sprintf("HTTP/1.1 %d ", status)) {
					t.Errorf("%s: not refused %d: %q", name, status, got)
				}
				continue
			}
			if got != first {
				t.Errorf("%s: %v wrote\n%q\n%v wrote\n%q", name, vias[0], first, vias[i], got)
			}
		}
	}
}

// TestRejectWholeOperatorValues: what an operator's [policy.reject] may
// hold (content types with CR or LF, spaces to trim, control bytes, none,
// a long one; bodies with CR LF and a head in them, binary, at and past
// the limit written whole; statuses without a reason phrase), under each
// rate_limit_headers mode, gets the same bytes from the front as from
// net/http, and no line a content type smuggles reaches the wire as a
// field of its own.
func TestRejectWholeOperatorValues(t *testing.T) {
	t.Parallel()
	contentTypes := []string{
		"", "a", "text/plain;\x00x", "\x7f", "x\vy", "x\fy", "é\xff", "a\tb", "a  b",
		" a", "a ", "\ta", "a\t", "a\r\nX-Injected: 1", "a\nX-Injected: 2", "a\rX-Injected: 3", "\r\n", " ", strings.Repeat("c", 3000),
	}
	bodies := []string{"", "x", "a\r\n\r\nHTTP/1.1 200 OK\r\nX-Injected: 4\r\n\r\n", "\x00\xff", strings.Repeat("z", maxWholeBody), strings.Repeat("z", maxWholeBody+1)}
	statuses := []int{429, 400, 499, 503, 599, 418, 430}
	modes := []config.HeadersMode{config.HeadersDraft, config.HeadersLegacy, config.HeadersBoth, config.HeadersNone}
	reqs := wholeBasic()
	up := startScriptUpstream(t, nil).ln.Addr().String()
	n := 0
	for i, ct := range contentTypes {
		for j, body := range bodies {
			if raceDetector && (i+j)%3 != 0 {
				continue // a sample under the race detector
			}
			n++
			status, mode, own := statuses[n%len(statuses)], modes[n%len(modes)], n%2 == 0
			edit := func(c *config.Config) {
				c.Server.RateLimitHeaders = mode
				// A body of "" is the problem+json one, under the
				// operator's content type (or the default one).
				c.Policies[0].Reject = config.Reject{Status: status, Body: body, ContentType: ct}
				if body == "" && own {
					c.Policies[0].Reject.ContentType = config.DefaultRejectContentType
				}
			}
			t.Run(fmt.Sprintf("ct%d-body%d", i, j), func(t *testing.T) {
				t.Parallel()
				vias := []wholeVia{viaFront, viaNetHTTP, viaFrontMap}
				var rigs []*wholeRig
				for _, via := range vias {
					rig := startWholeRig(t, via, up, wholeCfg, edit, nil)
					primeWhole(t, rig.addr)
					rigs = append(rigs, rig)
				}
				compareWhole(t, rigs, vias, reqs, status)
				got := readAll(t, rigs[0].addr, reqs["get"])
				head, _, _ := strings.Cut(got, "\r\n\r\n")
				if strings.Contains(head, "\r\nX-Injected") {
					t.Errorf("content type %q: a field of its own on the wire: %q", ct, head)
				}
			})
		}
	}
}

// TestRejectWholeLongHead: a rejection whose head, with limit names as
// long as the configuration takes, is past what the front writes before
// its body in one buffer (4 KiB with a body of maxWholeBody), pipelined
// or not: the bytes of net/http, and of the map's path.
func TestRejectWholeLongHead(t *testing.T) {
	t.Parallel()
	up := startScriptUpstream(t, nil).ln.Addr().String()
	for _, nameLen := range []int{1200, 2100, 5000} {
		cfg := strings.ReplaceAll(wholeCfg, "LNAME", strings.Repeat("n", nameLen))
		edit := func(c *config.Config) {
			c.Policies[0].Reject = config.Reject{Status: 429, Body: strings.Repeat("b", maxWholeBody), ContentType: "text/plain"}
		}
		t.Run(fmt.Sprint(nameLen), func(t *testing.T) {
			t.Parallel()
			vias := []wholeVia{viaFront, viaNetHTTP, viaFrontMap}
			var rigs []*wholeRig
			for _, via := range vias {
				rig := startWholeRig(t, via, up, cfg, edit, nil)
				primeWhole(t, rig.addr)
				rigs = append(rigs, rig)
			}
			compareWhole(t, rigs, vias, wholeBasic(), 429)
		})
	}
}

// hangUpstream accepts connections and reads them, never answering,
// until the test ends.
func hangUpstream(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// concWholeCfg is a policy of one request in flight per client (QUEUE:
// its queue), whose limit lets everything through: a second request is
// refused by the concurrency gate (slots.go), with the limit's
// RateLimit fields of an admitted request.
const concWholeCfg = `
[server]
trusted_proxies = ["127.0.0.1/32"]
[[upstream]]
name = "app"
targets = ["http://UP"]
timeout = "5s"
[[policy]]
name = "all"
upstream = "app"
  [policy.concurrency]
  limit = 1
  QUEUE
  [[policy.limits]]
  name = "l"
  algorithm = "token_bucket"
  rate = "100000/s"
  burst = 100000
`

// holdSlot sends a request to addr that the upstream never answers, and
// waits until the proxy holds its slot (it has reached the upstream).
func holdSlot(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
	t.Cleanup(func() { c.Close() })
	time.Sleep(100 * time.Millisecond)
}

// TestRejectWholeConcurrencyRefusal: a request the concurrency gate
// refuses, at once or after waiting in the slot queue (the front
// watching the client meanwhile, pipelined requests coming in), is
// answered with the bytes of net/http and of the map's path.
func TestRejectWholeConcurrencyRefusal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, queue string }{
		{"at-once", ""},
		{"after-waiting", "queue = 1\n  max_wait = \"60ms\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := strings.ReplaceAll(concWholeCfg, "QUEUE", tc.queue)
			vias := []wholeVia{viaFront, viaNetHTTP, viaFrontMap}
			var rigs []*wholeRig
			for _, via := range vias {
				rig := startWholeRig(t, via, hangUpstream(t), cfg, nil, nil)
				holdSlot(t, rig.addr)
				rigs = append(rigs, rig)
			}
			reqs := wholeBasic()
			reqs["id-max"] = wholeRequests["id-max"]
			compareWhole(t, rigs, vias, reqs, 429)
		})
	}
}

// TestRejectWholeOverride: a client with a per-key override is refused
// with RateLimit fields built for its request (not the policy's, built
// once), written whole as net/http writes them.
func TestRejectWholeOverride(t *testing.T) {
	t.Parallel()
	up := startScriptUpstream(t, nil).ln.Addr().String()
	vias := []wholeVia{viaFront, viaNetHTTP, viaFrontMap}
	var rigs []*wholeRig
	for _, via := range vias {
		rig := startWholeRig(t, via, up, strings.ReplaceAll(wholeCfg, "LNAME", "burst"), nil, func(o *Options, set *policy.Set) {
			ovs, err := memstore.NewOverrides(memstore.OverrideOptions{})
			if err != nil {
				t.Fatal(err)
			}
			key, err := KeyFor(set.Policies[0], &set.Config.Server, []string{"127.0.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			if err := ovs.Set(context.Background(), perkey.Override{Policy: "all", Key: StoreKey(key), Scale: 2, SetAt: t0}); err != nil {
				t.Fatal(err)
			}
			o.Overrides = ovs
		})
		// The override's bucket holds 2.
		primeWhole(t, rig.addr)
		primeWhole(t, rig.addr)
		rigs = append(rigs, rig)
	}
	compareWhole(t, rigs, vias, wholeBasic(), 429)
	got := readAll(t, rigs[0].addr, wholeRequests["get"])
	if !strings.Contains(got, "\r\nRatelimit-Policy: \"burst\";q=2;w=") {
		t.Errorf("not the override's fields: %q", got)
	}
}

var (
	accessTS = regexp.MustCompile(`"ts":"[^"]*"`)
	accessID = regexp.MustCompile(`"request_id":"[0-9a-f]{32}"`)
	created  = regexp.MustCompile(`created_timestamp:\{[^}]*\}`)
)

// settledAccess is an access log without what varies from run to run:
// the time stamps and drawn request ids.
func settledAccess(s string) string {
	return accessID.ReplaceAllString(accessTS.ReplaceAllString(s, `"ts":"X"`), `"request_id":"X"`)
}

// metricsText renders what reg gathers, without the series' creation
// times.
func metricsText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		fmt.Fprintln(&b, mf.String())
	}
	return created.ReplaceAllString(b.String(), "created_timestamp:X")
}

// TestRejectWholeAccessLogAndMetrics: a rejection written whole is
// answered with the bytes of the others (every request of
// wholeRequests), and logged (status, bytes_sent, request_id, decision…) and counted as the
// same rejection written through WriteHeader, by the front and by
// net/http: GET and HEAD, kept alive or closed, pipelined, refused by a
// limit or by the concurrency gate.
func TestRejectWholeAccessLogAndMetrics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, cfg string
		prime     func(*testing.T, string)
	}{
		{"limit", wholeCfg, primeWhole},
		{"concurrency", strings.ReplaceAll(concWholeCfg, "QUEUE", ""), holdSlot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vias := []wholeVia{viaFront, viaNetHTTP, viaFrontMap}
			var logs, metrics, wires []string
			for _, via := range vias {
				up := hangUpstream(t)
				if tc.name == "limit" {
					up = startScriptUpstream(t, nil).ln.Addr().String()
				}
				rig := startWholeRig(t, via, up, tc.cfg, nil, nil)
				tc.prime(t, rig.addr)
				var wire strings.Builder
				for _, name := range sortedKeys(wholeRequests) {
					fmt.Fprintf(&wire, "%s:\n%q\n", name, settled(readAll(t, rig.addr, wholeRequests[name])))
				}
				wires = append(wires, wire.String())
				logs = append(logs, settledAccess(rig.access.String()))
				metrics = append(metrics, metricsText(t, rig.reg))
			}
			for i := 1; i < len(vias); i++ {
				if wires[i] != wires[0] {
					t.Errorf("answers\n%v:\n%s\n%v:\n%s", vias[0], wires[0], vias[i], wires[i])
				}
				if logs[i] != logs[0] {
					t.Errorf("access log\n%v:\n%s\n%v:\n%s", vias[0], logs[0], vias[i], logs[i])
				}
				if metrics[i] != metrics[0] {
					t.Errorf("metrics\n%v:\n%s\n%v:\n%s", vias[0], metrics[0], vias[i], metrics[i])
				}
			}
			if n := strings.Count(logs[0], `"status":429`); n < 10 {
				t.Errorf("%d rejections logged, want 10 or more:\n%s", n, logs[0])
			}
			for _, line := range strings.Split(strings.TrimSpace(logs[0]), "\n") {
				if strings.Contains(line, `"status":429`) && !strings.Contains(line, `"bytes_sent":`) {
					t.Errorf("no bytes_sent: %s", line)
				}
			}
		})
	}
}

// TestRejectWholePipelinedStress: many connections, each pipelining
// refused GETs and HEADs (some with a trusted request id) and ending
// with Connection: close, all at once: each connection reads exactly
// net/http's bytes for the same requests, with no answer lost,
// duplicated or out of frame.
func TestRejectWholePipelinedStress(t *testing.T) {
	t.Parallel()
	conns, perConn := 16, 40
	if raceDetector {
		conns, perConn = 6, 20
	}
	var raw strings.Builder
	for i := range perConn {
		method := "GET"
		if i%3 == 1 {
			method = "HEAD"
		}
		fmt.Fprintf(&raw, "%s /p%d HTTP/1.1\r\nHost: a\r\n", method, i)
		if i%4 == 2 {
			fmt.Fprintf(&raw, "X-Request-Id: req-%d\r\n", i)
		}
		if i == perConn-1 {
			raw.WriteString("Connection: close\r\n")
		}
		raw.WriteString("\r\n")
	}
	up := startScriptUpstream(t, nil).ln.Addr().String()
	ref := startWholeRig(t, viaNetHTTP, up, wholeCfg, nil, nil)
	primeWhole(t, ref.addr)
	want := settled(readAll(t, ref.addr, raw.String()))
	if n := strings.Count(want, "HTTP/1.1 429 "); n != perConn {
		t.Fatalf("net/http answered %d of %d", n, perConn)
	}
	front := startWholeRig(t, viaFront, up, wholeCfg, nil, nil)
	primeWhole(t, front.addr)
	var wg sync.WaitGroup
	errs := make(chan string, conns)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", front.addr)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			// Written in pieces, as a client's writes may arrive.
			s := raw.String()
			go func() {
				for len(s) > 0 {
					n := min(len(s), 97)
					if _, err := io.WriteString(c, s[:n]); err != nil {
						return
					}
					s = s[n:]
				}
			}()
			got, _ := io.ReadAll(bufio.NewReader(c))
			if g := settled(string(got)); g != want {
				errs <- fmt.Sprintf("a connection read\n%q\nnet/http wrote\n%q", g, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestRejectWholeForwardAuthDenyStatus: the forward-auth endpoint's
// [forward_auth] deny_status wraps the writer (statusWriter), which
// hides WriteWhole: served by the front, a refusal still carries
// deny_status, as net/http writes it, not the policy's 429 written
// whole; and without deny_status, the endpoint's 429 is written whole
// as net/http writes it.
func TestRejectWholeForwardAuthDenyStatus(t *testing.T) {
	t.Parallel()
	const cfgText = `
[forward_auth]
listen = "127.0.0.1:0"
trusted_senders = ["127.0.0.1"]
DENY
[[upstream]]
name = "app"
targets = ["http://upstream.invalid"]
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1
  window = "1h"
`
	for _, tc := range []struct {
		deny   string
		status int
	}{{"deny_status = 401", 401}, {"", 429}} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			var addrs []string
			for _, front := range []bool{true, false} {
				cfg, err := config.Parse("fa.toml", []byte(strings.ReplaceAll(cfgText, "DENY", tc.deny)))
				if err != nil {
					t.Fatal(err)
				}
				set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
				if err != nil {
					t.Fatal(err)
				}
				h := New(set, Options{Now: func() time.Time { return t0 }})
				addrs = append(addrs, serveFrontOrNetHTTP(t, h.ForwardAuth(), front))
			}
			req := "GET /auth HTTP/1.1\r\nHost: a\r\nX-Forwarded-Uri: /x\r\nX-Forwarded-Method: GET\r\n\r\n"
			for _, addr := range addrs {
				if got := readAll(t, addr, req); !strings.HasPrefix(got, "HTTP/1.1 200 ") {
					t.Fatalf("first request: %q", got)
				}
			}
			for _, raw := range []string{req, strings.Replace(req, "GET /auth", "HEAD /auth", 1), req + req} {
				got, want := settled(readAll(t, addrs[0], raw)), settled(readAll(t, addrs[1], raw))
				if got != want {
					t.Errorf("the front wrote\n%q\nnet/http\n%q", got, want)
				}
				if !strings.HasPrefix(got, fmt.Sprintf("HTTP/1.1 %d ", tc.status)) {
					t.Errorf("answered %q, want status %d", got, tc.status)
				}
			}
		})
	}
}

// TestRejectWholeClosing: a rejection written whole while the server
// keeps no connection alive (keep-alives disabled; shut down while the
// request waited in the slot queue) carries Connection: close and ends
// the connection, pipelined requests unanswered, as net/http's does.
func TestRejectWholeClosing(t *testing.T) {
	t.Parallel()
	cfgText := strings.ReplaceAll(concWholeCfg, "QUEUE", "queue = 1\n  max_wait = \"300ms\"")
	for _, shutdown := range []bool{false, true} {
		t.Run(fmt.Sprintf("shutdown=%v", shutdown), func(t *testing.T) {
			t.Parallel()
			var outs []string
			for _, front := range []bool{true, false} {
				cfg, err := config.Parse("closing.toml", []byte(strings.ReplaceAll(cfgText, "UP", hangUpstream(t))))
				if err != nil {
					t.Fatal(err)
				}
				set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
				if err != nil {
					t.Fatal(err)
				}
				h := New(set, Options{Now: func() time.Time { return t0 }})
				// entered is closed when the handler has the first request:
				// Shutdown must come after the server has read it (a
				// request read during Shutdown is a documented difference
				// of the front's, TestServerShutdownNewConnectionAnswered).
				held, entered := make(chan struct{}), make(chan struct{})
				var heldOnce, enteredOnce sync.Once
				handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					switch r.URL.Path {
					case "/hold":
						heldOnce.Do(func() { close(held) })
					case "/x":
						enteredOnce.Do(func() { close(entered) })
					}
					h.ServeHTTP(w, r)
				})
				srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				shut, keepAlives := srv.Shutdown, srv.SetKeepAlivesEnabled
				if front {
					f := h1.New(srv)
					shut, keepAlives = f.Shutdown, f.SetKeepAlivesEnabled
					go f.Serve(ln)
					t.Cleanup(func() { f.Close() })
				} else {
					go srv.Serve(ln)
					t.Cleanup(func() { srv.Close() })
				}
				addr := ln.Addr().String()
				holdSlot(t, addr)
				<-held
				raw := "GET /x HTTP/1.1\r\nHost: a\r\n\r\nHEAD /y HTTP/1.1\r\nHost: a\r\n\r\n"
				if !shutdown {
					keepAlives(false)
					outs = append(outs, settled(readAll(t, addr, raw)))
					continue
				}
				res := make(chan string, 1)
				go func() { res <- settled(readAll(t, addr, raw)) }()
				<-entered
				time.Sleep(50 * time.Millisecond) // in the slot queue by then, most likely; if not, it queues after: the same answer
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				go shut(ctx)
				outs = append(outs, <-res)
				cancel()
			}
			if outs[0] != outs[1] {
				t.Errorf("the front wrote\n%q\nnet/http\n%q", outs[0], outs[1])
			}
			if strings.Count(outs[0], "HTTP/1.1 429 ") != 1 || !strings.Contains(outs[0], "\r\nConnection: close\r\n") {
				t.Errorf("not one refusal with Connection: close: %q", outs[0])
			}
		})
	}
}
