package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/limitproxy/limitproxy/internal/h1"
	"github.com/limitproxy/limitproxy/policy/config"
)

// bodyArrival is what an upstream saw of one request: its Expect fields,
// how long its body came after its head, and the body.
type bodyArrival struct {
	expect []string
	wait   time.Duration
	body   string
}

// startSilentUpstream starts an HTTP/1.1 upstream that never sends 100
// Continue (RFC 9110 lets a server not send it): on a raw socket it
// reads each request head, then its body as the head frames it, records
// what it saw on the returned channel, and answers 200 "ok".
func startSilentUpstream(t *testing.T) (addr string, got <-chan bodyArrival) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan bodyArrival, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					c.SetDeadline(time.Now().Add(10 * time.Second))
					req, err := http.ReadRequest(br) // never answers 100 Continue
					if err != nil {
						return
					}
					head := time.Now()
					body, err := io.ReadAll(req.Body)
					if err != nil {
						return
					}
					ch <- bodyArrival{expect: req.Header["Expect"], wait: time.Since(head), body: string(body)}
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), ch
}

// startRawH2CUpstream starts an h2c upstream (HTTP/2 with prior
// knowledge) on raw frames, which never sends 100 Continue: for each
// stream it records what startSilentUpstream records (the Expect fields
// as the request's header block has them: net/http's HTTP/2 server hides
// them from its handlers) and answers with status, and body if not
// empty, once the request has ended; or, if early, as soon as its head
// is in (the body then recorded as empty).
func startRawH2CUpstream(t *testing.T, status, body string, early bool) (addr string, got <-chan bodyArrival) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan bodyArrival, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveRawH2C(c, status, body, early, ch)
		}
	}()
	return ln.Addr().String(), ch
}

func serveRawH2C(c net.Conn, status, body string, early bool, ch chan<- bodyArrival) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	type stream struct {
		expect []string
		head   time.Time
		body   bytes.Buffer
	}
	streams := map[uint32]*stream{}
	answer := func(id uint32, s *stream) {
		ch <- bodyArrival{expect: s.expect, wait: time.Since(s.head), body: s.body.String()}
		delete(streams, id)
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
		if body != "" {
			enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true, EndStream: body == ""})
		if body != "" {
			fr.WriteData(id, true, []byte(body))
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			s := &stream{head: time.Now()}
			for _, hf := range f.RegularFields() {
				if strings.EqualFold(hf.Name, "expect") {
					s.expect = append(s.expect, hf.Value)
				}
			}
			streams[f.StreamID] = s
			if early || f.StreamEnded() {
				answer(f.StreamID, s)
			}
		case *http2.DataFrame:
			if s := streams[f.StreamID]; s != nil {
				s.body.Write(f.Data())
				if f.StreamEnded() {
					answer(f.StreamID, s)
				}
			}
		}
	}
}

// serveFrontLog is serveFront keeping the server's error log (where a
// handler's panic goes, for the front and net/http alike).
func serveFrontLog(tb testing.TB, h http.Handler) (addr string, errLog *lockedBuffer) {
	tb.Helper()
	errLog = new(lockedBuffer)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(errLog, "", 0)}
	front := h1.New(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go front.Serve(ln)
	tb.Cleanup(func() { front.Close() })
	return ln.Addr().String(), errLog
}

// sendExpecting sends head on a new connection to addr; if it offers a
// body with "Expect: 100-continue", waits for the proxy's 100 Continue
// before sending body, as a client does. It returns the final answer's
// status and body.
func sendExpecting(t *testing.T, addr, head, body string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	req := &http.Request{Method: strings.Fields(head)[0]}
	resp, err := http.ReadResponse(br, req)
	if body != "" {
		if err != nil || resp.StatusCode != http.StatusContinue {
			t.Fatalf("before the body: %v, %v; want 100 Continue", resp, err)
		}
		if _, err := io.WriteString(c, body); err != nil {
			t.Fatal(err)
		}
		resp, err = http.ReadResponse(br, req)
	}
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

// TestExpectNotForwarded (issue 35): a request whose client sends
// "Expect: 100-continue" reaches the upstream without it, and its body
// at once, through every forwarding path: a bodiless request (on the sync
// transport), a buffered
// body (in memory and spooled to a file) and a streamed one (with a
// Content-Length, chunked) on http.Transport, and an h2c upstream. The
// upstreams never send 100 Continue; forwarded, the Expect made
// http.Transport (HTTP/1.1 and HTTP/2 alike) hold the body back for its
// ExpectContinueTimeout (1 s).
func TestExpectNotForwarded(t *testing.T) {
	t.Parallel()
	large := strings.Repeat("0123456789", 10000) // over memoryBodyBytes: spooled
	chunked := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(s), s) }
	streamed := func(c *config.Config) { c.Upstreams[0].Buffering = false }
	h2c := func(c *config.Config) { c.Upstreams[0].Protocol = config.ProtocolH2C }
	for _, c := range []struct {
		name string
		h2c  bool
		edit func(*config.Config)
		head string // {P}: the path
		body string // sent after 100 Continue; "" none
		want string // the body the upstream gets
	}{
		{"no body", false, nil, "POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n", "", ""},
		{"buffered", false, nil, "POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", "hello", "hello"},
		{"buffered/spooled", false, nil, fmt.Sprintf("POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(large)), large, large},
		{"buffered/chunked", false, nil, "POST {P} HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", chunked("hello"), "hello"},
		{"streamed", false, streamed, "POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", "hello", "hello"},
		{"streamed/chunked", false, streamed, "POST {P} HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", chunked("hello"), "hello"},
		{"h2c/no body", true, h2c, "POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n", "", ""},
		{"h2c/buffered", true, h2c, "POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", "hello", "hello"},
		{"h2c/streamed", true, func(c *config.Config) { h2c(c); streamed(c) }, "POST {P} HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", "hello", "hello"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up, got := startSilentUpstream(t)
			if c.h2c {
				up, got = startRawH2CUpstream(t, "200", "ok", false)
			}
			h := forwardHandler(t, up, "rate = \"1000000/s\"\nburst = 1000000", c.edit)
			addr, errLog := serveFrontLog(t, h)
			start := time.Now()
			status, body := sendExpecting(t, addr, strings.ReplaceAll(c.head, "{P}", "/e"), c.body)
			took := time.Since(start)
			if status != http.StatusOK || body != "ok" {
				t.Fatalf("the client got %d %q, want 200 \"ok\" (server log: %s)", status, body, errLog)
			}
			var a bodyArrival
			select {
			case a = <-got:
			default:
				t.Fatal("the upstream saw no request")
			}
			if a.expect != nil {
				t.Errorf("the upstream got Expect: %q; want none", a.expect)
			}
			if a.body != c.want {
				t.Errorf("the upstream got a body of %d bytes, want %d", len(a.body), len(c.want))
			}
			// The upstream's Expect (checked above) is what decides; the
			// wait it caused is the continue timeout, 1 s. The body
			// follows the head at once on loopback (microseconds): 900
			// ms apart tells the two apart even on a loaded machine,
			// where the whole exchange (a body spooled to disk, the race
			// detector) has been seen to take over 500 ms.
			if a.wait >= 900*time.Millisecond {
				t.Errorf("the body reached the upstream %v after the head; want at once", a.wait)
			}
			if took >= 5*time.Second {
				t.Errorf("the exchange took %v", took)
			}
		})
	}
}
