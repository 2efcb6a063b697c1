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

// bench429 is the proxy's 429 as the benchmarks write it: a connection
// that only buffers, and the head's seven fields, values shared as the
// proxy shares them.
type bench429 struct {
	c    *conn
	req  *http.Request
	w    *response
	body []byte
	// The fields' values: Retry-After, Content-Type, Content-Length,
	// Cache-Control, Ratelimit, Ratelimit-Policy, X-Request-Id.
	ra, ct, cl, cc, rl, rp, id []string
}

func newBench429() *bench429 {
	req, _ := http.NewRequest("GET", "/", nil)
	return &bench429{
		c:    bufferedConn(),
		req:  req,
		w:    &response{header: http.Header{}},
		body: make([]byte, 191),
		ra:   []string{"1"}, ct: []string{"application/problem+json"}, cl: []string{"191"}, cc: []string{"no-store"},
		rl: []string{`"bench";r=0;t=1`}, rp: []string{`"bench";q=1000;w=1`}, id: []string{"00000000000000000000000000000000"},
	}
}

// next readies the response for the next answer, its header set as the
// proxy sets a rejection's, the buffer emptied.
func (bb *bench429) next() *response {
	w, c := bb.w, bb.c
	c.out = c.out[:0]
	hdr := w.header
	clear(hdr)
	*w = response{c: c, req: bb.req, header: hdr, clen: -1, announced: -1, pending: c.wb.pending[:0]}
	hdr["Retry-After"] = bb.ra
	hdr["Content-Type"] = bb.ct
	hdr["Content-Length"] = bb.cl
	hdr["Cache-Control"] = bb.cc
	hdr["Ratelimit"] = bb.rl
	hdr["Ratelimit-Policy"] = bb.rp
	hdr["X-Request-Id"] = bb.id
	return w
}

// BenchmarkWriteHead429 writes the proxy's 429 through the response
// writer (the head of seven fields and a 191-byte body) into the
// connection's buffer.
func BenchmarkWriteHead429(b *testing.B) {
	bb := newBench429()
	for b.Loop() {
		w := bb.next()
		w.WriteHeader(429)
		w.Write(bb.body)
		w.done = true
		w.commitPending()
	}
}

// BenchmarkWriteWhole429 is BenchmarkWriteHead429's answer written
// whole (WriteWhole), as the proxy writes a rejection to the front: the
// same map set, its fields handed over written out.
func BenchmarkWriteWhole429(b *testing.B) {
	bb := newBench429()
	var fields [10]string
	fields[0] = "Cache-Control: no-store\r\nContent-Length: 191\r\nContent-Type: application/problem+json\r\n"
	fields[1], fields[2], fields[3], fields[4], fields[5] = "Ratelimit: ", bb.rl[0], "\r\nRatelimit-Policy: ", bb.rp[0], "\r\nRetry-After: "
	fields[6], fields[7], fields[8], fields[9] = bb.ra[0], "\r\nX-Request-Id: ", bb.id[0], "\r\n"
	for b.Loop() {
		if !bb.next().WriteWhole(429, fields, bb.body) {
			b.Fatal("declined")
		}
	}
}
