package proxy

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/h1"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// rejectRequests are requests refused by rejectRig's proxy, sent raw:
// what a rejection's head depends on beyond its policy (keep-alive or
// not, HEAD, a client's X-Request-Id, trusted or not).
var rejectRequests = map[string]string{
	"get":         "GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"head":        "HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n",
	"http10":      "GET /x HTTP/1.0\r\nHost: a\r\n\r\n",
	"http10-ka":   "GET /x HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
	"close":       "GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
	"id":          "GET /x HTTP/1.1\r\nHost: a\r\nX-Request-Id: client-id-1\r\n\r\n",
	"id-quotes":   "GET /x HTTP/1.1\r\nHost: a\r\nX-Request-Id: a\"b\\c{}\r\n\r\n",
	"id-twice":    "GET /x HTTP/1.1\r\nHost: a\r\nX-Request-Id: one\r\nX-Request-Id: two\r\n\r\n",
	"conn-header": "GET /x HTTP/1.1\r\nHost: a\r\nConnection: X-Request-Id\r\n\r\n",
	"pipelined":   "GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET /y HTTP/1.1\r\nHost: a\r\n\r\n",
}

// rejectConfigs are the policy and server settings a rejection's head
// depends on: its rate-limit fields (built once per policy, or written
// per request: a t past the cached ones), none or legacy ones (which
// the front writes from the map), a [policy.reject] of its own, a body
// past what is written whole, and a trusted proxy's request id.
var rejectConfigs = []struct {
	name  string
	limit string
	edit  func(*config.Config)
}{
	{"draft", `rate = "1/s"` + "\nburst = 1", nil},
	{"draft-long-t", `rate = "1/h"` + "\nburst = 1", nil},
	{"none", `rate = "1/s"` + "\nburst = 1", func(c *config.Config) { c.Server.RateLimitHeaders = config.HeadersNone }},
	{"legacy", `rate = "1/s"` + "\nburst = 1", func(c *config.Config) { c.Server.RateLimitHeaders = config.HeadersLegacy }},
	{"both", `rate = "1/s"` + "\nburst = 1", func(c *config.Config) { c.Server.RateLimitHeaders = config.HeadersBoth }},
	{"own-reject", `rate = "1/s"` + "\nburst = 1", func(c *config.Config) {
		c.Policies[0].Reject = config.Reject{Status: 503, Body: "slow down\n", ContentType: "text/plain; charset=utf-8"}
	}},
	{"large-body", `rate = "1/s"` + "\nburst = 1", func(c *config.Config) {
		c.Policies[0].Reject = config.Reject{Status: 429, Body: strings.Repeat("x", maxWholeBody+1), ContentType: "text/plain"}
	}},
	{"body-at-limit", `rate = "1/s"` + "\nburst = 1", func(c *config.Config) {
		c.Policies[0].Reject = config.Reject{Status: 429, Body: strings.Repeat("y", maxWholeBody), ContentType: "text/plain"}
	}},
	{"trusted", `rate = "1/s"` + "\nburst = 1", func(c *config.Config) {
		c.Server.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	}},
}

// startRejectRig serves a proxy whose one client is over its limit, by
// the HTTP/1.1 front (front) or by net/http alone, and returns its
// address: the first request was let through, so every later one is
// refused (the clock holds still).
func startRejectRig(t *testing.T, front bool, limit string, edit func(*config.Config)) string {
	up := startScriptUpstream(t, nil)
	h := forwardHandler(t, up.ln.Addr().String(), limit, edit)
	rig := &forwardRig{addr: serveFrontOrNetHTTP(t, h, front), up: up}
	if got := rig.exchange(t, "GET /first HTTP/1.1\r\nHost: a\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200 ") {
		t.Fatalf("first request: %q", got)
	}
	return rig.addr
}

// serveFrontOrNetHTTP serves h on a new loopback listener until the
// test ends, by the HTTP/1.1 front (front) as on a plain-HTTP listener or
// by net/http alone, and returns its address.
func serveFrontOrNetHTTP(t testing.TB, h http.Handler, front bool) string {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if front {
		f := h1.New(srv)
		go f.Serve(ln)
		t.Cleanup(func() { f.Close() })
	} else {
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return ln.Addr().String()
}

// TestRejectWholeDifferential: a rejection written whole by the front
// (recorder.writeWhole, the front's WriteWhole) is the bytes net/http
// writes for the same rejection from its header map, under every
// configuration a rejection's head depends on and for every kind of
// request (the date and drawn request ids aside); one that cannot be
// written whole (legacy fields, a large body) is too, through the map.
// Each connection is read to its end: what follows the answer (another
// answer, or the close) is compared too.
func TestRejectWholeDifferential(t *testing.T) {
	t.Parallel()
	for _, cf := range rejectConfigs {
		t.Run(cf.name, func(t *testing.T) {
			t.Parallel()
			viaFront := startRejectRig(t, true, cf.limit, cf.edit)
			viaNetHTTP := startRejectRig(t, false, cf.limit, cf.edit)
			for _, name := range sortedKeys(rejectRequests) {
				raw := rejectRequests[name]
				got, want := settled(readAll(t, viaFront, raw)), settled(readAll(t, viaNetHTTP, raw))
				if got != want {
					t.Errorf("%s: the front wrote\n%q\nnet/http\n%q", name, got, want)
				}
				if !strings.Contains(got, " 429 ") && !strings.Contains(got, " 503 ") {
					t.Errorf("%s: not refused: %q", name, got)
				}
			}
		})
	}
}

// readAll sends raw on a new connection to addr, reads an answer to
// each request in it (as a client reads them: heads, then the bodies as
// the heads frame them, HEAD's without), then half-closes (a client that
// is done: both servers end the connection then), and returns all it
// read, to the connection's end.
func readAll(t *testing.T, addr, raw string) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, raw)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var in bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &in))
	for _, line := range strings.Split(raw, "\r\n") {
		if method, _, ok := strings.Cut(line, " /"); ok && (strings.HasSuffix(line, " HTTP/1.1") || strings.HasSuffix(line, " HTTP/1.0")) {
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				break
			}
			io.Copy(io.Discard, resp.Body)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, br)
	return in.String()
}

// fakeWhole is a ResponseWriter that takes a whole answer: what
// recorder.writeWhole handed it.
type fakeWhole struct {
	header  http.Header
	fields  string
	body    []byte
	decline bool
}

func (f *fakeWhole) Header() http.Header         { return f.header }
func (f *fakeWhole) Write(p []byte) (int, error) { return len(p), nil }
func (f *fakeWhole) WriteHeader(int)             {}
func (f *fakeWhole) WriteWhole(code int, fields [10]string, body []byte) bool {
	if f.decline {
		return false
	}
	f.fields, f.body = strings.Join(fields[:], ""), body
	return true
}

// TestRejectWholeTaken: which rejections recorder.writeWhole writes
// whole, and their fields as it hands them over, sorted by name as
// net/http writes the map; those it leaves to WriteHeader, having written
// nothing and changed nothing but the request id (which WriteHeader sets
// as well).
func TestRejectWholeTaken(t *testing.T) {
	rj := &rejection{body: []byte("{}\n"), contentType: []string{"application/problem+json"}, contentLength: []string{"3"},
		fixed: "Cache-Control: no-store\r\nContent-Length: 3\r\nContent-Type: application/problem+json\r\n"}
	fixed := func(h http.Header) {
		h["Retry-After"] = secondsField(7)
		h["Content-Type"] = rj.contentType
		h["Content-Length"] = rj.contentLength
		h["Cache-Control"] = cacheControlNoStore
	}
	const head = "Cache-Control: no-store\r\nContent-Length: 3\r\nContent-Type: application/problem+json\r\n"
	for _, tc := range []struct {
		name    string
		id      string
		set     func(http.Header)
		decline bool
		want    string // "": not taken
	}{
		{"draft", "id1", func(h http.Header) {
			h["Ratelimit"] = []string{`"p";r=0;t=7`}
			h["Ratelimit-Policy"] = []string{`"p";q=1;w=1`}
		},
			false, head + "Ratelimit: \"p\";r=0;t=7\r\nRatelimit-Policy: \"p\";q=1;w=1\r\nRetry-After: 7\r\nX-Request-Id: id1\r\n"},
		{"none", "id1", nil, false, head + "Retry-After: 7\r\nX-Request-Id: id1\r\n"},
		{"no-id", "", nil, false, head + "Retry-After: 7\r\n"},
		{"declined", "id1", nil, true, ""},
		{"policy-alone", "id1", func(h http.Header) { h["Ratelimit-Policy"] = []string{`"p";q=1;w=1`} }, false, ""},
		{"legacy", "id1", func(h http.Header) { h["X-Ratelimit-Limit"] = []string{"1"} }, false, ""},
		{"other-field", "id1", func(h http.Header) { h["Allow"] = []string{"GET"} }, false, ""},
		{"lower-case-key", "id1", func(h http.Header) { h["ratelimit"] = []string{"x"} }, false, ""},
		{"two-values", "id1", func(h http.Header) { h["Ratelimit"] = []string{"a", "b"}; h["Ratelimit-Policy"] = []string{"c"} }, false, ""},
		{"space-to-trim", "id1", func(h http.Header) { h["Ratelimit"] = []string{"a "}; h["Ratelimit-Policy"] = []string{"c"} }, false, ""},
		{"tab-to-trim", "id1", func(h http.Header) { h["Ratelimit"] = []string{"a"}; h["Ratelimit-Policy"] = []string{"\tc"} }, false, ""},
		{"newline", "id1", func(h http.Header) { h["Ratelimit"] = []string{"a\nb"}; h["Ratelimit-Policy"] = []string{"c"} }, false, ""},
		{"id-with-space", "a ", nil, false, ""},
		{"retry-after-cr", "id1", func(h http.Header) { h["Retry-After"] = []string{"7\r"} }, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw := &fakeWhole{header: http.Header{}, decline: tc.decline}
			rec := &recorder{ResponseWriter: fw}
			if tc.id != "" {
				rec.id = []string{tc.id}
			}
			fixed(fw.header)
			if tc.set != nil {
				tc.set(fw.header)
			}
			taken := rec.writeWhole(429, rj)
			if taken != (tc.want != "") {
				t.Fatalf("taken = %v, want %v", taken, tc.want != "")
			}
			if !taken {
				if rec.status != 0 || rec.sent != 0 || fw.fields != "" {
					t.Errorf("not taken, yet status %d, sent %d, fields %q", rec.status, rec.sent, fw.fields)
				}
				return
			}
			if fw.fields != tc.want || string(fw.body) != "{}\n" {
				t.Errorf("fields\n%q\nwant\n%q (body %q)", fw.fields, tc.want, fw.body)
			}
			if rec.status != 429 || rec.head != 429 || rec.sent != 3 {
				t.Errorf("status %d, head %d, sent %d; want 429, 429, 3", rec.status, rec.head, rec.sent)
			}
		})
	}
	// A writer that is not the front's.
	rec := &recorder{ResponseWriter: &nonWhole{header: http.Header{}}}
	fixed(rec.Header())
	if rec.writeWhole(429, rj) {
		t.Error("written whole to a writer without WriteWhole")
	}
}

type nonWhole struct{ header http.Header }

func (n *nonWhole) Header() http.Header         { return n.header }
func (n *nonWhole) Write(p []byte) (int, error) { return len(p), nil }
func (n *nonWhole) WriteHeader(int)             {}

// TestRejectionFixed: a rejection's fixed fields are prepared for
// writeWhole only when net/http would write them as they are.
func TestRejectionFixed(t *testing.T) {
	for _, tc := range []struct {
		contentType, body string
		want              bool
	}{
		{"application/problem+json", "", true},
		{"text/plain; charset=utf-8", "x", true},
		{"text/plain ", "x", false},
		{"text/plain", strings.Repeat("x", maxWholeBody+1), false},
	} {
		p := &policy.Policy{Policy: config.Policy{Name: "p", Reject: config.Reject{Status: 429, Body: tc.body, ContentType: tc.contentType}}}
		rj := newRejection(p, config.HeadersDraft)
		if (rj.fixed != "") != tc.want {
			t.Errorf("content type %q, body of %d: fixed %q", tc.contentType, len(tc.body), rj.fixed)
		}
	}
}
