package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// t0 is the injected clock's start: noon UTC, so a 24h fixed window resets
// in exactly 12h.
var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// fakeClock is an injected clock the tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock                   { c := &fakeClock{}; c.ns.Store(t0.UnixNano()); return c }
func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// upstream is an httptest backend that records every request it gets.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []arrival
}

type arrival struct {
	at   time.Time
	path string
	seq  string
	xff  string
	host string
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.arrivals = append(u.arrivals, arrival{time.Now(), r.URL.Path, r.Header.Get("X-Seq"), r.Header.Get("X-Forwarded-For"), r.Host})
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) seen() []arrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]arrival(nil), u.arrivals...)
}

// env is a running proxy over loopback with the given config file, its
// upstream replaced by up.
type env struct {
	proxy *httptest.Server
	up    *upstream
	clock *fakeClock
	cfg   *config.Config
}

func start(t *testing.T, file string, up *upstream, clock *fakeClock, edit func(*config.Config)) *env {
	t.Helper()
	cfg, err := config.Load("../testdata/policy/valid/" + file)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	for i := range cfg.Upstreams {
		cfg.Upstreams[i].Targets = []*url.URL{target}
	}
	if edit != nil {
		edit(cfg)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	var now func() time.Time
	if clock != nil {
		now = clock.now
	}
	h := New(set, Options{Now: now})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ReadHeaderTimeout = cfg.Server.ReadHeaderTimeout
	srv.Config.MaxHeaderBytes = cfg.Server.MaxHeaderBytes
	srv.Start()
	t.Cleanup(srv.Close)
	return &env{proxy: srv, up: up, clock: clock, cfg: cfg}
}

func (e *env) get(t *testing.T, path string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", e.proxy.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1] // the client ignores Header["Host"]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// refuseUnmatched sets [server] unmatched = "refuse": a request no policy
// matches is answered 404.
func refuseUnmatched(cfg *config.Config) {
	cfg.Server.Unmatched, cfg.Server.UnmatchedUpstream = config.UnmatchedRefuse, ""
}

// TestAlgorithms drives each algorithm's policy through the proxy with the
// clock held still: exactly its limit passes, and every response carries
// the docs/responses.md headers its decision implies. The draft fields are
// read with an independent Structured Fields parser (httpsfv), as a client
// would: an item per policy, q, w, r and t as integer parameters.
func TestAlgorithms(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, "all_algorithms.toml", up, newClock(), nil)
	cases := []struct {
		path, policy string
		window       int64                  // RateLimit-Policy w
		next         func(used int64) int64 // t: until one more unit is available
		reset        func(used int64) int64 // X-RateLimit-Reset: until all are
		retry        int64
	}{
		// 5 tokens at 1/h: one more token in 1h, all of them 1h per token used.
		{"/tb", "tb", 18000, func(int64) int64 { return 3600 }, func(u int64) int64 { return u * 3600 }, 3600},
		// 24h windows from midnight UTC: 12h left at noon.
		{"/fw", "fw", 86400, func(int64) int64 { return 43200 }, func(int64) int64 { return 43200 }, 43200},
		// Every entry at noon: all leave at 13:00.
		{"/sl", "sl", 3600, func(int64) int64 { return 3600 }, func(int64) int64 { return 3600 }, 3600},
		// 6 slots of 10 minutes, u units in the noon slot: it is the oldest
		// slot from 13:00, weighing u·(13:10 − now)/10m; one more unit fits
		// once that is ≤ u − 1, at 13:10 − 10m·(u−1)/u; all have left at
		// 13:10 (70m). One more request fits at 62m.
		{"/sw", "sw", 3600, func(u int64) int64 { return 3600 + (600+u-1)/u }, func(int64) int64 { return 4200 }, 3720},
	}
	for _, c := range cases {
		t.Run(c.policy, func(t *testing.T) {
			for i := range 7 {
				resp := e.get(t, c.path)
				wantStatus := http.StatusOK
				if i >= 5 {
					wantStatus = http.StatusTooManyRequests
				}
				if resp.StatusCode != wantStatus {
					t.Fatalf("request %d: status %d, want %d", i, resp.StatusCode, wantStatus)
				}
				used := int64(min(i, 4) + 1)
				remaining := 5 - used
				pol := sfItem(t, resp.Header, "RateLimit-Policy", c.policy)
				if pol["q"] != 5 || pol["w"] != c.window || len(pol) != 2 {
					t.Errorf("request %d: RateLimit-Policy %v, want q=5 w=%d", i, pol, c.window)
				}
				rl := sfItem(t, resp.Header, "RateLimit", c.policy)
				if rl["r"] != remaining || rl["t"] != c.next(used) || len(rl) != 2 {
					t.Errorf("request %d: RateLimit %v, want r=%d t=%d", i, rl, remaining, c.next(used))
				}
				if got, want := resp.Header.Get("X-RateLimit-Remaining"), fmt.Sprint(remaining); got != want {
					t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", i, got, want)
				}
				if got, want := resp.Header.Get("X-RateLimit-Reset"), fmt.Sprint(c.reset(used)); got != want {
					t.Errorf("request %d: X-RateLimit-Reset %q, want %q", i, got, want)
				}
				if got := resp.Header.Get("X-RateLimit-Limit"); got != "5" {
					t.Errorf("request %d: X-RateLimit-Limit %q", i, got)
				}
				if i >= 5 {
					if got, want := resp.Header.Get("Retry-After"), fmt.Sprint(c.retry); got != want {
						t.Errorf("request %d: Retry-After %q, want %q", i, got, want)
					}
					if ra, _ := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); ra < rl["t"] {
						t.Errorf("request %d: Retry-After %d shorter than t=%d", i, ra, rl["t"])
					}
					if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
						t.Errorf("rejection Content-Type %q", ct)
					}
				}
			}
		})
	}
	if n := len(up.seen()); n != 4*5 {
		t.Errorf("upstream saw %d requests, want the 20 admitted", n)
	}
}

// TestRejectionBody checks the problem+json body of docs/responses.md.
func TestRejectionBody(t *testing.T) {
	e := start(t, "all_algorithms.toml", newUpstream(t, nil), newClock(), nil)
	for range 5 {
		e.get(t, "/fw")
	}
	resp, err := http.Get(e.proxy.URL + "/fw")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body["type"] != quotaExceeded || body["status"] != float64(429) {
		t.Errorf("body %v", body)
	}
	if vp, _ := body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "fw" {
		t.Errorf("violated-policies %v, want [fw]", body["violated-policies"])
	}
}

// TestMultiLimit: a request the second limit rejects consumes nothing from
// the first.
func TestMultiLimit(t *testing.T) {
	clock := newClock()
	e := start(t, "all_algorithms.toml", newUpstream(t, nil), clock, nil)
	status := func() int { return e.get(t, "/multi").StatusCode }
	// Bucket of 3, window of 2 a minute.
	for i := range 2 {
		if s := status(); s != 200 {
			t.Fatalf("request %d: %d", i, s)
		}
	}
	for i := range 8 {
		if s := status(); s != 429 {
			t.Fatalf("rejection %d by the window: %d", i, s)
		}
	}
	clock.advance(time.Minute) // a new window; the bucket earns 1/60 of a token
	if s := status(); s != 200 {
		t.Fatalf("next window: %d; the window's rejections drained the bucket", s)
	}
	if s := status(); s != 429 {
		t.Fatalf("bucket should be empty now: %d", s)
	}
}

// TestShadow: a shadow policy forwards everything it would reject.
func TestShadow(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, "all_algorithms.toml", up, newClock(), nil)
	for i := range 4 {
		if resp := e.get(t, "/shadow"); resp.StatusCode != 200 {
			t.Fatalf("shadow request %d: %d", i, resp.StatusCode)
		}
	}
	if n := len(up.seen()); n != 4 {
		t.Errorf("upstream saw %d, want 4", n)
	}
}

// TestLeakyBucket: queued requests reach the upstream at least 1/rate
// apart and in the order they were queued; the queue's overflow is
// rejected at once; a client that leaves while queued is never forwarded.
//
// Tolerance: a released request still has to be scheduled and forwarded,
// which on a busy 2-core machine can take a few milliseconds, and one
// released late can arrive closer to the next. Gaps are held to the
// interval (250ms) minus 25ms, and the whole span to 4 intervals minus 25ms.
// Sends are 60ms apart so that the queue order is the send order unless the
// machine stalls for longer than that.
func TestLeakyBucket(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, "all_algorithms.toml", up, nil, nil) // real clock: the queue runs on timers
	type result struct {
		seq    int
		status int
		took   time.Duration
	}
	results := make(chan result, 10)
	send := func(seq int, ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.proxy.URL+"/lb", nil)
		req.Header.Set("X-Seq", fmt.Sprint(seq))
		begin := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			results <- result{seq, 0, time.Since(begin)}
			return
		}
		resp.Body.Close()
		results <- result{seq, resp.StatusCode, time.Since(begin)}
	}
	// Request 2 gives up while it waits: at 470ms, before its turn at
	// 500ms (4/s after 0 at once and 1 at 250ms; a stall only makes turns
	// later). Request 6, sent at 360ms, must find the queue full (2, 3, 4,
	// 5) until then: a stall of up to 110ms still leaves it full.
	cancelCtx, cancel := context.WithTimeout(context.Background(), 470*time.Millisecond)
	defer cancel()
	first := time.Now() // request 0 is sent after this: no turn is earlier
	for seq := range 7 {
		ctx := context.Background()
		if seq == 2 {
			ctx = cancelCtx
		}
		go send(seq, ctx)
		time.Sleep(60 * time.Millisecond) // the leaky queue runs on the real clock: spaced sends keep the queue order the send order
	}
	// 0 leaves at once; 1..4 fill the queue of 4 (2 then leaves); 5 and 6:
	// 5 finds the queue full unless 2 has left already, 6 does.
	got := map[int]result{}
	for range 7 {
		r := <-results
		got[r.seq] = r
	}
	if got[6].status != 429 {
		t.Errorf("request 6: status %d, want 429 (queue full)", got[6].status)
	}
	if got[6].took > time.Second {
		t.Errorf("the rejection took %v; it must be immediate", got[6].took)
	}
	arrivals := up.seen()
	var order []string
	for i, a := range arrivals {
		order = append(order, a.seq)
		if a.seq == "2" {
			t.Errorf("request 2 left the queue but reached the upstream")
		}
		// The i-th request forwarded leaves the queue at its turn, i
		// × 250ms after the first left (at once), and reaches the
		// upstream no sooner: a late forwarding (a loaded machine)
		// makes arrivals later, never earlier, though it can bring two
		// closer together, so each is held to its turn, not to the gap
		// after the one before it.
		if early := first.Add(time.Duration(i) * 250 * time.Millisecond).Sub(a.at); early > 25*time.Millisecond {
			t.Errorf("arrival %d came %v before its turn, %v after the first request was sent; the rate allows one per 250ms", i, early, a.at.Sub(first))
		}
	}
	if len(arrivals) < 4 || order[0] != "0" || order[1] != "1" || order[2] != "3" || order[3] != "4" {
		t.Errorf("arrival order %v, want 0 1 3 4 (FIFO, 2 cancelled)", order)
	}
	if span := arrivals[len(arrivals)-1].at.Sub(arrivals[0].at); span < time.Duration(len(arrivals)-1)*250*time.Millisecond-25*time.Millisecond {
		t.Errorf("%d arrivals spread over %v", len(arrivals), span)
	}
}

// TestSpoofing: X-Forwarded-For and Forwarded from an untrusted peer do not
// change the client key; from a trusted peer (127.0.0.2, bound on
// loopback) they do.
func TestSpoofing(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, "all_algorithms.toml", up, newClock(), nil)
	client := func(local string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	do := func(c *http.Client, hdr, val string) int {
		req, _ := http.NewRequest("GET", e.proxy.URL+"/fw", nil)
		if hdr != "" {
			req.Header.Set(hdr, val)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	untrusted := client("127.0.0.1")
	// 5 per key: an untrusted client sending a new X-Forwarded-For or
	// Forwarded with every request still gets 5.
	admitted := 0
	for i := range 8 {
		hdr, val := "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)
		if i%2 == 1 {
			hdr, val = "Forwarded", fmt.Sprintf("for=198.51.100.%d", i)
		}
		if do(untrusted, hdr, val) == 200 {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("untrusted peer with rotating forwarding headers: %d admitted, want 5", admitted)
	}
	// Behind a trusted proxy, each forwarded client has its own key.
	trusted := client("127.0.0.2")
	for i := range 3 {
		for range 5 {
			if s := do(trusted, "X-Forwarded-For", fmt.Sprintf("203.0.113.9, 198.51.100.%d", 50+i)); s != 200 {
				t.Fatalf("trusted proxy, client %d: %d", i, s)
			}
		}
		if s := do(trusted, "X-Forwarded-For", fmt.Sprintf("203.0.113.9, 198.51.100.%d", 50+i)); s != 429 {
			t.Fatalf("trusted proxy, client %d's 6th request: %d", i, s)
		}
	}
	// The upstream sees the chain from the keyed client on (the part its
	// client wrote dropped), plus the peer.
	last := up.seen()[len(up.seen())-1]
	if last.xff != "198.51.100.52, 127.0.0.2" {
		t.Errorf("X-Forwarded-For at the upstream %q", last.xff)
	}
	first := up.seen()[0]
	if first.xff != "127.0.0.1" {
		t.Errorf("X-Forwarded-For from an untrusted peer reached the upstream as %q; want only the peer", first.xff)
	}
}

// TestMatchAndKeys: hosts with wildcards, methods, headers; on_missing =
// "reject" answers 400; an unmatched request gets 404 problem+json.
func TestMatchAndKeys(t *testing.T) {
	// Unmatched requests refused, so that a 404 shows one.
	e := start(t, "all_algorithms.toml", newUpstream(t, nil), newClock(), refuseUnmatched)
	do := func(method, host string, hdr map[string]string) int {
		req, _ := http.NewRequest(method, e.proxy.URL+"/key/x", nil)
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	free := map[string]string{"X-Plan": "free", "X-API-Key": "k1"}
	for _, c := range []struct {
		method, host string
		hdr          map[string]string
		want         int
	}{
		{"GET", "api.example.com", free, 200},
		{"GET", "a.b.example.org", free, 200},
		{"GET", "example.org", free, 404},                                                       // *.example.org needs a sub-domain
		{"POST", "api.example.com", free, 404},                                                  // methods = ["GET"]
		{"GET", "api.example.com", map[string]string{"X-API-Key": "k1"}, 404},                   // X-Plan missing
		{"GET", "api.example.com", map[string]string{"X-Plan": "paid", "X-API-Key": "k1"}, 404}, // wrong value
		{"GET", "api.example.com", map[string]string{"X-Plan": "free"}, 400},                    // key part missing: reject
		{"GET", "api.example.com", free, 429},                                                   // k1's third
		{"GET", "api.example.com", map[string]string{"X-Plan": "free", "X-API-Key": "k2"}, 200}, // another key
	} {
		if got := do(c.method, c.host, c.hdr); got != c.want {
			t.Errorf("%s %s %v: %d, want %d", c.method, c.host, c.hdr, got, c.want)
		}
	}
	resp := e.get(t, "/nothing/here")
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("unmatched: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestACMEPathIsOrdinary: the proxy answers no ACME challenge (in ACME
// mode the challenge listener does, see cmd/limitproxy), so
// /.well-known/acme-challenge/ is limited like any other path, and the
// normalized path counts: minimal.toml's catch-all admits 100 at once and
// the clock is held still, so the challenge paths and their dot-segment
// spellings share that one burst.
func TestACMEPathIsOrdinary(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, "minimal.toml", up, newClock(), nil)
	admitted := 0
	for i := range 150 {
		path := "/.well-known/acme-challenge/token"
		if i%2 == 1 {
			path = "/.well-known/acme-challenge/%2e%2e/%2e%2e/login"
		}
		if e.get(t, path).StatusCode == 200 {
			admitted++
		}
	}
	if admitted != 100 {
		t.Errorf("challenge paths: %d admitted, want the burst of 100", admitted)
	}
}

// TestBadInput: each kind of bad input gets its documented answer, fast.
func TestBadInput(t *testing.T) {
	t.Parallel()
	t.Run("malformed header", func(t *testing.T) {
		e := start(t, "all_algorithms.toml", newUpstream(t, nil), newClock(), nil)
		status := raw(t, e.proxy.Listener.Addr().String(), "GET /fw HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
		if status != 400 {
			t.Errorf("malformed header: %d, want 400", status)
		}
	})
	t.Run("oversized headers", func(t *testing.T) {
		e := start(t, "all_algorithms.toml", newUpstream(t, nil), newClock(), nil)
		big := strings.Repeat("a", 80<<10)
		status := raw(t, e.proxy.Listener.Addr().String(), "GET /fw HTTP/1.1\r\nHost: x\r\nX-Big: "+big+"\r\n\r\n")
		if status != 431 {
			t.Errorf("oversized headers: %d, want 431", status)
		}
	})
	t.Run("slow client", func(t *testing.T) {
		e := start(t, "all_algorithms.toml", newUpstream(t, nil), newClock(), func(c *config.Config) {
			c.Server.ReadHeaderTimeout = 200 * time.Millisecond
		})
		conn, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "GET /fw HTTP/1.1\r\nHost: x\r\n") // and never finish
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		begin := time.Now()
		io.Copy(io.Discard, conn) // returns when the server closes
		if took := time.Since(begin); took > 5*time.Second {
			t.Errorf("a client that never finished its headers was held %v", took)
		}
	})
	t.Run("dead upstream", func(t *testing.T) {
		dead := newUpstream(t, nil)
		dead.Close() // refuses connections from now on
		e := start(t, "all_algorithms.toml", dead, newClock(), nil)
		begin := time.Now()
		resp := e.get(t, "/fw")
		if resp.StatusCode != 502 || time.Since(begin) > 5*time.Second {
			t.Errorf("dead upstream: %d after %v, want 502 at once", resp.StatusCode, time.Since(begin))
		}
	})
	t.Run("hanging upstream", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		hang := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		e := start(t, "all_algorithms.toml", hang, newClock(), func(c *config.Config) {
			c.Upstreams[0].Timeout = 300 * time.Millisecond
		})
		begin := time.Now()
		resp := e.get(t, "/fw")
		took := time.Since(begin)
		if resp.StatusCode != 504 || took < 300*time.Millisecond || took > 5*time.Second {
			t.Errorf("hanging upstream: %d after %v, want 504 after the 300ms timeout", resp.StatusCode, took)
		}
	})
}

// raw sends a raw request and returns the response status.
func raw(t *testing.T, addr, req string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, req)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sfItem parses field name of h as a Structured Field List (RFC 9651) with
// httpsfv, requires exactly one member, the String policy, and returns its
// parameters, every one an Integer.
func sfItem(t *testing.T, h http.Header, name, policy string) map[string]int64 {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(name))
	if err != nil {
		t.Fatalf("%s %q: not a Structured Field List: %v", name, h.Values(name), err)
	}
	if len(list) != 1 {
		t.Fatalf("%s %q: %d members, want 1", name, h.Values(name), len(list))
	}
	item, ok := list[0].(httpsfv.Item)
	if !ok || item.Value != policy {
		t.Fatalf("%s %q: member %#v, want the String %q", name, h.Values(name), list[0], policy)
	}
	params := map[string]int64{}
	for _, k := range item.Params.Names() {
		v, _ := item.Params.Get(k)
		n, ok := v.(int64)
		if !ok {
			t.Fatalf("%s %q: parameter %s = %#v, want an Integer", name, h.Values(name), k, v)
		}
		params[k] = n
	}
	return params
}
