package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/policy/config"
)

// rawUpstream answers every HTTP/1.1 request on its keep-alive
// connections with one fixed response, parsing no more than the end of
// the request head, so that it allocates (nearly) nothing per request: a
// process-wide allocation count then belongs to the proxy. It stops when
// the test ends.
func rawUpstream(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReaderSize(c, 16<<10)
				for {
					// Bodyless requests only: the head ends the request.
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// rawClient sends GET path over one keep-alive connection and reads the
// answer (headers and a Content-Length body) without net/http's client,
// allocating nothing per request after its first.
type rawClient struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func dialRaw(tb testing.TB, addr, path string) *rawClient {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawClient{c: c, br: bufio.NewReaderSize(c, 16<<10),
		req: []byte("GET " + path + " HTTP/1.1\r\nHost: bench.test\r\nUser-Agent: bench\r\n\r\n")}
}

var contentLength = []byte("content-length:")

// do sends the request and returns the answer's status code.
func (r *rawClient) do() (int, error) {
	if _, err := r.c.Write(r.req); err != nil {
		return 0, err
	}
	status, n := 0, -1
	for first := true; ; first = false {
		line, err := r.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if first {
			if len(line) < 12 {
				return 0, fmt.Errorf("status line %q", line)
			}
			status, _ = strconv.Atoi(string(line[9:12])) // no allocation: the conversion does not escape
			continue
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
			v := bytes.TrimSpace(line[len(contentLength):])
			n = 0
			for _, d := range v {
				n = n*10 + int(d-'0')
			}
		}
	}
	if n < 0 {
		return 0, fmt.Errorf("no Content-Length")
	}
	if _, err := r.br.Discard(n); err != nil {
		return 0, err
	}
	return status, nil
}

// BenchmarkForwarded is one GET forwarded over real loopback connections
// by the whole server (the HTTP/1.1 front, limitproxy's handler under a
// token bucket that never rejects, the upstream transport), with the
// access log and metrics as a production configuration has them but the
// log discarded. The client and the upstream are raw sockets that allocate
// nothing per request, so allocs/op is the proxy's allocations per
// forwarded request (TestServerAllocations holds it to at most 40).
//
//	go test -run '^$' -bench Forwarded -benchmem ./cmd/limitproxy/internal/server
func BenchmarkForwarded(b *testing.B) {
	benchmarkServer(b, "1000000000/s", 1000000000, 200)
}

// BenchmarkRejected is BenchmarkForwarded's request refused: the whole
// server answering a client far over its policy's limit (1/10s, burst 1:
// a Retry-After of a few seconds, as under most limits) with a 429, access
// log on and off, metrics on. allocs/op is the proxy's allocations per
// rejection, net/http's server included. (A benchmark longer than 10s
// sees a request admitted every 10s: one in hundreds of thousands.)
//
//	go test -run '^$' -bench Rejected -benchmem ./cmd/limitproxy/internal/server
func BenchmarkRejected(b *testing.B) {
	benchmarkServer(b, "1/10s", 1, 429)
}

// benchmarkServer times one GET at a time over one keep-alive connection
// through the whole server (ns/op, the round trip; cpu-ns/op, the
// process's CPU), under a token bucket of rate and burst, every
// answer after the warm-up having status want (or 200, which the bucket
// may admit now and then).
func benchmarkServer(b *testing.B, rate string, burst, want int) {
	for _, access := range []bool{false, true} {
		b.Run(fmt.Sprintf("accesslog=%v", access), func(b *testing.B) {
			c := startCountedServer(b, rate, burst, want, access)
			b.ReportAllocs()
			before := processCPU(b)
			for b.Loop() {
				if code, err := c.do(); err != nil || (code != want && code != 200) {
					b.Fatalf("%d %v", code, err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-before)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time the process has used, every thread in user
// and system mode: per request (cpu-ns/op), the proxy's, the raw client's
// and the raw upstream's together, which a machine busy with other work
// disturbs less than the round trip's wall time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startCountedServer starts the whole server in front of a rawUpstream,
// under a token bucket of rate and burst and with the access log on or
// off, and returns a raw client's keep-alive connection to it, warmed up
// (pools, the upstream connection) with answers of status want (or 200).
// The server stops when tb ends.
func startCountedServer(tb testing.TB, rate string, burst, want int, access bool) *rawClient {
	up := rawUpstream(tb)
	cfg, err := config.Parse("bench.toml", fmt.Appendf(nil, `
[server]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[log]
access = %v
[[upstream]]
name = "app"
targets = ["http://%s"]
[[policy]]
name = "bench"
upstream = "app"
key = ["ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = %q
  burst = %d
`, access, up, rate, burst))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listening, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, "", cfg, io.Discard, ready) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	var l listening
	select {
	case l = <-ready:
	case err := <-done:
		tb.Fatalf("serve: %v", err)
	}
	c := dialRaw(tb, l.Proxy.String(), "/bench/x?y=1")
	for range 100 { // warm the pools and the upstream connection
		if code, err := c.do(); err != nil || (code != want && code != 200) {
			tb.Fatalf("warm-up: %d %v", code, err)
		}
	}
	return c
}

// TestServerAllocations holds the whole server to the allocations per
// request BenchmarkForwarded and BenchmarkRejected measure, access log
// and metrics on: at most 40 per forwarded request (34 measured, 36
// under the race detector; issue 29's target was 30, met at 23 by a
// path that forwarded without httputil.ReverseProxy, which issue 36's
// one HTTP stack removed: ReverseProxy's clones are the difference) and
// 10 per 429 (7 measured, 8 under the race detector). testing.AllocsPerRun counts the whole
// process, so the test is not parallel, and the margins absorb what
// other goroutines allocate meanwhile.
func TestServerAllocations(t *testing.T) {
	for _, c := range []struct {
		name        string
		rate        string
		burst, want int
		most        float64
	}{
		{"forwarded", "1000000000/s", 1000000000, 200, 40},
		{"rejected", "1/10s", 1, 429, 10},
	} {
		rc := startCountedServer(t, c.rate, c.burst, c.want, true)
		n := testing.AllocsPerRun(2000, func() {
			if code, err := rc.do(); err != nil || (code != c.want && code != 200) {
				t.Fatalf("%s: %d %v", c.name, code, err)
			}
		})
		if n > c.most {
			t.Errorf("%s: %.1f allocations a request, want at most %v", c.name, n, c.most)
		}
		t.Logf("%s: %.1f allocations a request", c.name, n)
	}
}
