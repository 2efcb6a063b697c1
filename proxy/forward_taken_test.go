package proxy

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/h1"
)

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
// passed on by ReverseProxy as it comes: the client reads the first
// part while the upstream still holds back the rest; copied whole, it
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
