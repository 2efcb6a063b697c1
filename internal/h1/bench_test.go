package h1

import (
	"net/http"
	"testing"
)

// BenchmarkParseHeadWrk reads the head wrk sends (one field).
func BenchmarkParseHeadWrk(b *testing.B) {
	req := []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1:18090\r\n\r\n")
	var h head
	for b.Loop() {
		if !parseHead(req, &h) {
			b.Fatal("refused")
		}
	}
}

// BenchmarkWriteHead429 writes the proxy's 429 through the response
// writer (the head of seven fields and a 191-byte body) into the
// connection's buffer, the values shared as the proxy shares them.
func BenchmarkWriteHead429(b *testing.B) {
	c := &conn{srv: &Server{fallback: &http.Server{}}, out: make([]byte, 0, 4096), pending: make([]byte, 0, 2048)}
	req, _ := http.NewRequest("GET", "/", nil)
	body := make([]byte, 191)
	w := &response{header: http.Header{}}
	ra, ct, cl, cc, rl, rp, id := []string{"1"}, []string{"application/problem+json"}, []string{"191"}, []string{"no-store"}, []string{`"bench";r=0;t=1`}, []string{`"bench";q=1000;w=1`}, []string{"00000000000000000000000000000000"}
	for b.Loop() {
		hdr := w.header
		clear(hdr)
		*w = response{c: c, req: req, header: hdr, clen: -1, announced: -1, pending: c.pending[:0]}
		hdr["Retry-After"] = ra
		hdr["Content-Type"] = ct
		hdr["Content-Length"] = cl
		hdr["Cache-Control"] = cc
		hdr["Ratelimit"] = rl
		hdr["Ratelimit-Policy"] = rp
		hdr["X-Request-Id"] = id
		w.WriteHeader(429)
		w.Write(body)
		w.done = true
		w.commitPending()
		c.out = c.out[:0]
	}
}

// BenchmarkWriteWhole429 is BenchmarkWriteHead429's answer written
// whole (WriteWhole), as the proxy writes a rejection to the front: the
// same map set, its fields handed over written out.
func BenchmarkWriteWhole429(b *testing.B) {
	c := &conn{srv: &Server{fallback: &http.Server{}}, out: make([]byte, 0, 4096), pending: make([]byte, 0, 2048)}
	req, _ := http.NewRequest("GET", "/", nil)
	body := make([]byte, 191)
	w := &response{header: http.Header{}}
	ra, ct, cl, cc, rl, rp, id := []string{"1"}, []string{"application/problem+json"}, []string{"191"}, []string{"no-store"}, []string{`"bench";r=0;t=1`}, []string{`"bench";q=1000;w=1`}, []string{"00000000000000000000000000000000"}
	var fields [10]string
	fields[0] = "Cache-Control: no-store\r\nContent-Length: 191\r\nContent-Type: application/problem+json\r\n"
	fields[1], fields[2], fields[3], fields[4], fields[5] = "Ratelimit: ", rl[0], "\r\nRatelimit-Policy: ", rp[0], "\r\nRetry-After: "
	fields[6], fields[7], fields[8], fields[9] = ra[0], "\r\nX-Request-Id: ", id[0], "\r\n"
	for b.Loop() {
		hdr := w.header
		clear(hdr)
		*w = response{c: c, req: req, header: hdr, clen: -1, announced: -1, pending: c.pending[:0]}
		hdr["Retry-After"] = ra
		hdr["Content-Type"] = ct
		hdr["Content-Length"] = cl
		hdr["Cache-Control"] = cc
		hdr["Ratelimit"] = rl
		hdr["Ratelimit-Policy"] = rp
		hdr["X-Request-Id"] = id
		w.WriteWhole(429, fields, body)
		c.out = c.out[:0]
	}
}
