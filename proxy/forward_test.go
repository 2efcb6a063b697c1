package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/h1"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// scriptUpstream is a raw-socket upstream: it records each request as it
// arrived, byte for byte (head and Content-Length body), under the first
// segment of its path after /r/, and answers with its script's answer of
// that name (a HEAD with the answer's head alone), closing the connection
// after it if the answer ends with "\x00close"; a name without one is
// answered 200 "ok".
type scriptUpstream struct {
	ln     net.Listener
	mu     sync.Mutex
	script map[string]string
	got    map[string][]string
}

func startScriptUpstream(tb testing.TB, script map[string]string) *scriptUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := &scriptUpstream{ln: ln, script: maps.Clone(script), got: map[string][]string{}}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

// set makes answer the answer to requests named name.
func (u *scriptUpstream) set(name, answer string) {
	u.mu.Lock()
	u.script[name] = answer
	u.mu.Unlock()
}

// take returns the requests recorded under name and forgets them: their
// varying parts and the upstream's own address masked, and a request
// repeated in a row once (the same request twice in a row is a retry on a
// kept-alive connection the upstream had closed meanwhile, as it does at
// some answers' end: as much a matter of timing as of path).
func (u *scriptUpstream) take(name string) []string {
	u.mu.Lock()
	got := u.got[name]
	delete(u.got, name)
	u.mu.Unlock()
	got = slices.Compact(got)
	for i, g := range got {
		got[i] = strings.ReplaceAll(varying.ReplaceAllString(g, "${1}X"), u.ln.Addr().String(), "UP")
	}
	return got
}

func (u *scriptUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var head bytes.Buffer
		n := int64(0)
		for {
			line, err := br.ReadString('\n')
			head.WriteString(line)
			if err != nil {
				return
			}
			if name, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Content-Length") {
				n, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
			if line == "\r\n" {
				break
			}
		}
		io.CopyN(&head, br, n)
		first, _, _ := strings.Cut(head.String(), "\r\n")
		name := "none"
		if _, target, ok := strings.Cut(first, "/r/"); ok {
			name, _, _ = strings.Cut(target, "/")
			name, _, _ = strings.Cut(name, " ")
		}
		u.mu.Lock()
		u.got[name] = append(u.got[name], head.String())
		answer, ok := u.script[name]
		u.mu.Unlock()
		if !ok {
			answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		}
		answer, closing := strings.CutSuffix(answer, "\x00close")
		if strings.HasPrefix(first, "HEAD ") {
			// A response to HEAD is its head (the last one: 1xx before it).
			last := strings.LastIndex(answer, "HTTP/1.")
			if i := strings.Index(answer[last+1:], "\r\n\r\n"); last >= 0 && i >= 0 {
				answer = answer[:last+1+i+4]
			}
		}
		if _, err := io.WriteString(c, answer); err != nil || closing {
			return
		}
	}
}

// forwardResponses are the upstream's answers, by name: of the common
// exchange (forwarded by target.direct) and of every kind it hands back
// to ReverseProxy, before or after the request is sent.
var forwardResponses = map[string]string{
	"plain":    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
	"empty":    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"nobody":   "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n",
	"notmod":   "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n",
	"error":    "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Length: 4\r\n\r\ndown",
	"hop":      "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nX-Keep: 1\r\nContent-Length: 2\r\n\r\nok",
	"named":    "HTTP/1.1 200 OK\r\nConnection: X-Hop, keep-alive\r\nX-Hop: 1\r\nX-Keep: 2\r\nContent-Length: 2\r\n\r\nok",
	"pragma":   "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nCache-Control: max-age=1\r\nContent-Length: 2\r\n\r\nok",
	"repeated": "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nVary: Accept\r\nVary: Origin\r\nContent-Length: 2\r\n\r\nok",
	"theirs":   "HTTP/1.1 200 OK\r\nX-Request-Id: upstream-id\r\nRatelimit: \"up\";r=1\r\nRatelimit-Policy: \"up\";q=9\r\nContent-Length: 2\r\n\r\nok",
	"oddcase":  "HTTP/1.1 200 OK\r\ncontent-type: TEXT/html\r\nx-lower: v\r\nContent-Length: 2\r\n\r\nok",
	"sse":      "HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream; charset=utf-8\r\nContent-Length: 9\r\n\r\ndata: x\n\n",
	"sselike":  "HTTP/1.1 200 OK\r\nContent-Type: application/x-event-streamish\r\nContent-Length: 2\r\n\r\nok",
	"chunked":  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"trailers": "HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 6\r\n\r\n",
	"untold":   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close\x00close",
	"early":    "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"switch":   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x00close",
	"short":    "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc\x00close",
	"nothing":  "\x00close",
	"garbage":  "HTTP/1.1 2x0 Nope\r\n\r\n\x00close",
	"status0":  "HTTP/1.1 000 Zero\r\n\r\nbody\x00close",        // read, then refused: 502
	"status99": "HTTP/1.1 099 X\r\nContent-Length: 2\r\n\r\nok", // of known length: direct's own
	"http10":   "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok\x00close",
	"big":      "HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("0123456789", 7000),
}

// forwardRequests are requests as clients send them, {P} standing for the
// path (which names the upstream's answer).
var forwardRequests = map[string]string{
	"get":        "GET {P} HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\n",
	"noua":       "GET {P} HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"emptyua":    "GET {P} HTTP/1.1\r\nHost: example.com\r\nUser-Agent:\r\n\r\n",
	"query":      "GET {P}?a=1;b=2&c=%zz&d=%2F HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"escaped":    "GET {P}/a%2Fb/%7E/caf%C3%A9 HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
	"keepalive":  "GET {P} HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nKeep-Alive: 300\r\n\r\n",
	"close":      "GET {P} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
	"named":      "GET {P} HTTP/1.1\r\nHost: h\r\nConnection: X-Secret, x-forwarded-for\r\nX-Secret: s\r\nX-Other: o\r\n\r\n",
	"forwarded":  "GET {P} HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nForwarded: for=1.2.3.4\r\nX-Real-IP: 1.2.3.4\r\nTrue-Client-IP: 5.6.7.8\r\n\r\n",
	"repeated":   "GET {P} HTTP/1.1\r\nHost: h\r\nAccept: a\r\nAccept: b\r\nCookie: x=1\r\nCookie: y=2\r\nX-Request-Id: client-id\r\n\r\n",
	"proxyauth":  "GET {P} HTTP/1.1\r\nHost: h\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\n\r\n",
	"te":         "GET {P} HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n",
	"tegzip":     "GET {P} HTTP/1.1\r\nHost: h\r\nTE: gzip\r\n\r\n",
	"upgrade":    "GET {P} HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n",
	"expect":     "GET {P} HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n",
	"head":       "HEAD {P} HTTP/1.1\r\nHost: h\r\n\r\n",
	"post0":      "POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
	"postbody":   "POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
	"delete":     "DELETE {P} HTTP/1.1\r\nHost: h\r\n\r\n",
	"absolute":   "GET http://example.com{P} HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"http10":     "GET {P} HTTP/1.0\r\nHost: h\r\n\r\n",
	"ipv6host":   "GET {P} HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
	"hightext":   "GET {P} HTTP/1.1\r\nHost: h\r\nX-Name: caf\xc3\xa9 \xff\r\nX-Empty:\r\n\r\n",
	"manyfields": "GET {P} HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-F: v\r\n", 40) + "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\n\r\n",
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// varying are the parts of an exchange that differ from one run to the
// next whichever path forwards it: the date, and a request id drawn for
// the request.
var varying = regexp.MustCompile(`(?m)^(Date: )[^\r\n]*|[0-9a-f]{32}`)

// settled is an answer without the parts that vary from run to run
// whichever path forwards it: varying's, and the Content-Type net/http
// sniffs for a streamed answer (no Content-Length), which it has if its first
// bytes come before ReverseProxy's first flush, a timer's, and lacks if
// they come after.
func settled(answer string) string {
	answer = varying.ReplaceAllString(answer, "${1}X")
	if head, _, _ := strings.Cut(answer, "\r\n\r\n"); !strings.Contains(head, "\r\nContent-Length: ") {
		answer = strings.Replace(answer, "\r\nContent-Type: text/plain; charset=utf-8\r\n", "\r\n", 1)
	}
	return answer
}

// forwardHandler is a handler with one upstream, at addr (5 s timeout),
// and one policy of a token bucket whose rate and burst keys are limit,
// its clock held at t0.
func forwardHandler(tb testing.TB, addr, limit string, edit func(*config.Config)) *Handler {
	cfg, err := config.Parse("forward.toml", []byte(`
[[upstream]]
name = "app"
targets = ["http://`+addr+`"]
timeout = "5s"
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
`+limit+"\n"))
	if err != nil {
		tb.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		tb.Fatal(err)
	}
	return New(set, Options{Now: func() time.Time { return t0 }})
}

// forwardRig is a proxy, served by the HTTP/1.1 front as on a plain-HTTP
// listener, in front of its own scripted upstream.
type forwardRig struct {
	addr string
	up   *scriptUpstream
}

func startForwardRig(tb testing.TB, reverseOnly bool, edit func(*config.Config)) *forwardRig {
	up := startScriptUpstream(tb, forwardResponses)
	h := forwardHandler(tb, up.ln.Addr().String(), "rate = \"1000000/s\"\nburst = 1000000", edit)
	h.reverseOnly = reverseOnly
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	front := h1.New(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go front.Serve(ln)
	tb.Cleanup(func() { front.Close() })
	return &forwardRig{addr: ln.Addr().String(), up: up}
}

// exchange sends raw on a new connection and returns the bytes of the
// proxy's answer, read as a client reads it (its head, then its body as
// the head frames it), or what came before the proxy closed the
// connection. The connection stays open meanwhile: a client that
// half-closes is one that went away (the proxy answers it 499).
func (r *forwardRig) exchange(t *testing.T, raw string) string {
	c := r.dial(t)
	defer c.Close()
	return c.exchange(raw)
}

// rigConn is a client's connection to a forwardRig.
type rigConn struct {
	net.Conn
	br *bufio.Reader
	in bytes.Buffer // what br has read
}

func (r *forwardRig) dial(t *testing.T) *rigConn {
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rigConn{Conn: c}
	rc.br = bufio.NewReader(io.TeeReader(c, &rc.in))
	return rc
}

// exchange is forwardRig.exchange's on c, which stays open after it.
func (c *rigConn) exchange(raw string) string {
	io.WriteString(c, raw)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	method, _, _ := strings.Cut(raw, " ")
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	n := c.in.Len() - c.br.Buffered()
	got := string(c.in.Next(n))
	return got
}

// TestForwardDirectDifferential: every request of forwardRequests, with
// every answer of forwardResponses, through a proxy that forwards the
// common exchange itself (target.direct) and through one that sends all
// through ReverseProxy: the upstream receives the same bytes from both,
// and the client the same bytes back (the date and drawn request ids
// aside). Cases are the product of both lists: the common exchange, what
// is handed to ReverseProxy before the request goes out (an upgrade, TE,
// a body; an Expect is dropped on both paths) and after its response is in (a switch, a body of
// unknown length, trailers, an event stream), errors (nothing, garbage,
// a body cut short), and hop-by-hop fields both ways.
func TestForwardDirectDifferential(t *testing.T) {
	t.Parallel()
	for _, edit := range []struct {
		name     string
		f        func(*config.Config)
		requests []string // nil: all
	}{
		{"default", nil, nil},
		{"preserve_host+target_path", func(c *config.Config) {
			c.Upstreams[0].PreserveHost = true
			u := *c.Upstreams[0].Targets[0]
			u.Path = "/base/"
			c.Upstreams[0].Targets[0] = &u
		}, []string{"get", "query", "escaped", "absolute", "ipv6host", "head"}},
		{"response_buffering", func(c *config.Config) { c.Upstreams[0].ResponseBuffering = true }, []string{"get", "head", "http10", "close"}},
	} {
		t.Run(edit.name, func(t *testing.T) {
			t.Parallel()
			direct := startForwardRig(t, false, edit.f)
			reverse := startForwardRig(t, true, edit.f)
			requests := edit.requests
			if requests == nil {
				requests = sortedKeys(forwardRequests)
				if raceDetector {
					// A sample under the race detector (scripts/test.sh also
					// runs this test without it, whole).
					requests = []string{"get", "named", "forwarded", "repeated", "te", "head", "postbody", "hightext"}
				}
			}
			for _, reqName := range requests {
				for _, respName := range sortedKeys(forwardResponses) {
					raw := strings.ReplaceAll(forwardRequests[reqName], "{P}", "/r/"+respName+"/"+reqName)
					gotD, gotR := settled(direct.exchange(t, raw)), settled(reverse.exchange(t, raw))
					if gotD != gotR {
						t.Errorf("%s → %s: the client got\ndirect:  %q\nreverse: %q", reqName, respName, gotD, gotR)
					}
				}
			}
			for _, respName := range sortedKeys(forwardResponses) {
				upD, upR := direct.up.take(respName), reverse.up.take(respName)
				if !slices.Equal(upD, upR) {
					t.Errorf("%s: the upstream got\ndirect:  %q\nreverse: %q", respName, upD, upR)
				}
			}
		})
	}
}

// TestForwardDirectKeepAlive: requests of different heads one after the
// other on one connection, through both paths, as
// TestForwardDirectDifferential's are on one each: the front keeps its
// header map from one request to the next, and direct shares the
// request's values with the outbound request (the upstream keeps its
// connection too).
func TestForwardDirectKeepAlive(t *testing.T) {
	t.Parallel()
	direct, reverse := startForwardRig(t, false, nil), startForwardRig(t, true, nil)
	cd, cr := direct.dial(t), reverse.dial(t)
	defer cd.Close()
	defer cr.Close()
	for i, reqName := range []string{"forwarded", "get", "repeated", "named", "hightext", "keepalive", "noua", "manyfields", "query", "get", "forwarded"} {
		raw := strings.ReplaceAll(forwardRequests[reqName], "{P}", "/r/ka"+strconv.Itoa(i)+"/"+reqName)
		gotD, gotR := settled(cd.exchange(raw)), settled(cr.exchange(raw))
		if gotD != gotR || !strings.HasPrefix(gotD, "HTTP/1.1 200 OK\r\n") {
			t.Errorf("#%d %s: the client got\ndirect:  %q\nreverse: %q", i, reqName, gotD, gotR)
		}
		if upD, upR := direct.up.take("ka"+strconv.Itoa(i)), reverse.up.take("ka"+strconv.Itoa(i)); !slices.Equal(upD, upR) || len(upD) != 1 {
			t.Errorf("#%d %s: the upstream got\ndirect:  %q\nreverse: %q", i, reqName, upD, upR)
		}
	}
}

// TestForwardDirectTaken: target.direct forwards the common exchange
// itself and leaves what it does not do to ReverseProxy, untouched (the
// differential test above passes however few requests direct takes).
func TestForwardDirectTaken(t *testing.T) {
	t.Parallel()
	up := startScriptUpstream(t, forwardResponses)
	h := forwardHandler(t, up.ln.Addr().String(), `rate = "10/s"`, nil)
	tg := h.snap.Load().pools["app"].targets[0]
	for _, c := range []struct {
		method, path string
		header       http.Header
		body         string
		want         bool
	}{
		{"GET", "/r/plain", nil, "", true},
		{"DELETE", "/r/empty", http.Header{"Connection": {"keep-alive"}, "X-Forwarded-For": {"1.2.3.4"}}, "", true},
		{"GET", "/r/plain", http.Header{"Te": {"trailers"}}, "", false},
		{"GET", "/r/plain", http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}, "", false},
		{"GET", "/r/plain", http.Header{"Expect": {"100-continue"}}, "", true}, // not forwarded: common
		{"POST", "/r/plain", nil, "abc", false},
	} {
		r := httptest.NewRequest(c.method, "http://example.com"+c.path, strings.NewReader(c.body))
		if c.body == "" {
			r.Body, r.ContentLength = http.NoBody, 0
		}
		r.RemoteAddr = "192.0.2.1:1234"
		for k, vv := range c.header {
			r.Header[k] = vv
		}
		before := fmt.Sprint(r.Header)
		w := httptest.NewRecorder()
		if got := tg.direct(w, r); got != c.want {
			t.Errorf("%s %s %v: direct took it: %v, want %v", c.method, c.path, c.header, got, c.want)
		}
		if !c.want && (w.Code != 200 || w.Body.Len() != 0 || len(w.Header()) != 0 || fmt.Sprint(r.Header) != before) {
			t.Errorf("%s %s %v: left to ReverseProxy, yet written to or changed", c.method, c.path, c.header)
		}
		if c.want && (w.Code != 200 || w.Body.Len() == 0 && c.path == "/r/plain") {
			t.Errorf("%s %s: %d %q", c.method, c.path, w.Code, w.Body)
		}
		if fmt.Sprint(r.Header) != before {
			t.Errorf("%s %s: the client's header changed: %s, was %s", c.method, c.path, fmt.Sprint(r.Header), before)
		}
	}
	if got := up.take("plain"); len(got) != 1 {
		t.Errorf("the upstream got %d requests for /r/plain, want 1 (the one direct took)", len(got))
	}
}
