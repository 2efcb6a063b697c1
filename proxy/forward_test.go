package proxy

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// scriptUpstream is a raw-socket upstream: it reads each request (head
// and Content-Length body) and answers with its script's answer named by
// the first segment of its path after /r/ (a HEAD with the answer's head alone), closing the connection
// after it if the answer ends with "\x00close"; a name without one is
// answered 200 "ok".
type scriptUpstream struct {
	ln     net.Listener
	mu     sync.Mutex
	script map[string]string
}

func startScriptUpstream(tb testing.TB, script map[string]string) *scriptUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := &scriptUpstream{ln: ln, script: maps.Clone(script)}
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
