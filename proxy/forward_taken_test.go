package proxy

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/h1"
)

// pathLog records, for each upstream response the target's
// ModifyResponse sees, which path forwarded it: "reverse" when the
// outbound request carries httputil.ReverseProxy's client trace (it
// wraps every outbound request's context in one, for the 1xx it passes
// on), "direct" when not (target.direct sends the request with the
// client's context).
type pathLog struct {
	mu  sync.Mutex
	got map[string][]string // by the request's path
}

func (l *pathLog) record(res *http.Response) {
	path := "direct"
	if httptrace.ContextClientTrace(res.Request.Context()) != nil {
		path = "reverse"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.got == nil {
		l.got = map[string][]string{}
	}
	l.got[res.Request.URL.Path] = append(l.got[res.Request.URL.Path], path)
}

func (l *pathLog) paths(p string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.got[p], ",")
}

// TestForwardHandlerTakesDirect: through the Handler, served by the
// HTTP/1.1 front as on a plain-HTTP listener, a plain bodiless GET (and
// HEAD, DELETE) over limitproxy's own sync transport is forwarded by
// target.direct, not by the target's ReverseProxy, and so is one with
// an Expect, which is not forwarded; requests direct leaves alone (a
// body, TE, an upgrade) go through ReverseProxy. The
// same requests through a handler that never calls direct
// (reverseOnly) all show ReverseProxy's path: the check tells them
// apart. (TestForwardDirectTaken calls direct itself; the differential
// tests pass whichever path the handler takes.)
func TestForwardHandlerTakesDirect(t *testing.T) {
	t.Parallel()
	for _, reverseOnly := range []bool{false, true} {
		name := "handler"
		if reverseOnly {
			name = "reverseOnly"
		}
		t.Run(name, func(t *testing.T) {
			up := startScriptUpstream(t, forwardResponses)
			h := forwardHandler(t, up.ln.Addr().String(), "rate = \"1000000/s\"\nburst = 1000000", nil)
			h.reverseOnly = reverseOnly
			tg := h.snap.Load().pools["app"].targets[0]
			if _, ok := tg.proxy.Transport.(*syncTransport); !ok {
				t.Fatalf("the target's transport is a %T, want limitproxy's sync transport", tg.proxy.Transport)
			}
			var seen pathLog
			modify := tg.proxy.ModifyResponse
			tg.proxy.ModifyResponse = func(res *http.Response) error {
				seen.record(res)
				return modify(res)
			}
			rig := &forwardRig{addr: serveFront(t, h), up: up}

			for _, c := range []struct {
				raw, status string
				direct      bool // target.direct's to forward
			}{
				{"GET /r/plain/get HTTP/1.1\r\nHost: example.com\r\n\r\n", "HTTP/1.1 200 OK\r\n", true},
				{"GET /r/plain/keepalive HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n", "HTTP/1.1 200 OK\r\n", true},
				{"HEAD /r/plain/head HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\n", true},
				{"DELETE /r/empty/delete HTTP/1.1\r\nHost: h\r\n\r\n", "HTTP/1.1 200 OK\r\n", true},
				{"POST /r/plain/postbody HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc", "HTTP/1.1 200 OK\r\n", false},
				{"GET /r/plain/te HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\n", "HTTP/1.1 200 OK\r\n", false},
				{"GET /r/plain/upgrade HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n", "HTTP/1.1 200 OK\r\n", false},
				{"GET /r/plain/expect HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n", "HTTP/1.1 200 OK\r\n", true}, // Expect is not forwarded
			} {
				got := rig.exchange(t, c.raw)
				first, _, _ := strings.Cut(c.raw, "\r\n")
				if !strings.HasPrefix(got, c.status) {
					t.Errorf("%s: the client got %q, want %q…", first, got, c.status)
					continue
				}
				_, target, _ := strings.Cut(first, " ")
				path, _, _ := strings.Cut(target, " ")
				want := "reverse"
				if c.direct && !reverseOnly {
					want = "direct"
				}
				if p := seen.paths(path); p != want {
					t.Errorf("%s: forwarded by %q, want %q (direct: target.direct; reverse: the target's ReverseProxy)", first, p, want)
				}
			}
		})
	}
}

// serveFront serves h with the HTTP/1.1 front, as on a plain-HTTP
// listener, on 127.0.0.1, and returns its address.
func serveFront(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	front := h1.New(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go front.Serve(ln)
	t.Cleanup(func() { front.Close() })
	return ln.Addr().String()
}

// TestForwardUnknownLengthPassedOnAsItComes: an upstream answer of
// unknown length (chunked, or delimited by the connection's close) is
// one target.direct hands to ReverseProxy (replay), which passes its
// body on as it comes: the client reads the first part while the
// upstream still holds back the rest. Copied by direct instead, it
// would sit in the front's buffer until the upstream ended. Every read
// has a 5 s deadline: a held-back answer fails the test, not hangs it.
func TestForwardUnknownLengthPassedOnAsItComes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, head, first, rest string }{
		{"chunked", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n", "6\r\nfirst\n\r\n", "5\r\nlast\n\r\n0\r\n\r\n"},
		{"until-close", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", "first\n", "last\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer conn.Close()
						conn.SetDeadline(time.Now().Add(15 * time.Second))
						br := bufio.NewReader(conn)
						for {
							line, err := br.ReadString('\n')
							if err != nil {
								return
							}
							if line == "\r\n" {
								break
							}
						}
						io.WriteString(conn, c.head+c.first)
						select {
						case <-release:
						case <-time.After(10 * time.Second):
						}
						io.WriteString(conn, c.rest)
					}()
				}
			}()
			h := forwardHandler(t, ln.Addr().String(), "rate = \"1000000/s\"\nburst = 1000000", nil)
			conn, err := net.Dial("tcp", serveFront(t, h))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			io.WriteString(conn, "GET /stream HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
			if err != nil {
				t.Fatalf("no answer while the upstream holds back the rest of its body: %v", err)
			}
			defer resp.Body.Close()
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || line != "first\n" {
				t.Fatalf("first line %q, %v; want %q while the upstream holds back the rest", line, err, "first\n")
			}
			once.Do(func() { close(release) })
		})
	}
}
