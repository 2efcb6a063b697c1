package h1

import (
	"net/http"
	"strings"
	"testing"
)

// bufferedConn is a connection of a server with no options, holding
// its write buffers, as while it answers a request.
func bufferedConn() *conn {
	c := &conn{srv: &Server{fallback: &http.Server{}}}
	c.takeWrite()
	return c
}

// newTestResponse is a response to req on a connection that only
// buffers (nothing is flushed in these tests).
func newTestResponse(method string) *response {
	c := bufferedConn()
	req, _ := http.NewRequest(method, "/", nil)
	return &response{c: c, req: req, header: http.Header{}, clen: -1, announced: -1, head: method == http.MethodHead, pending: c.wb.pending[:0]}
}

// TestWriteWhole: WriteWhole writes the head WriteHeader and Write write
// for a map that holds the fields it is handed (Date aside), for GET and
// HEAD, kept alive or not; and declines, having written nothing, what it
// cannot write so.
func TestWriteWhole(t *testing.T) {
	body := []byte(`{"a":1}` + "\n")
	set := func(h http.Header) {
		h["Cache-Control"] = []string{"no-store"}
		h["Content-Length"] = []string{"8"}
		h["Content-Type"] = []string{"application/json"}
		h["Retry-After"] = []string{"3"}
	}
	var fields [10]string
	fields[0] = "Cache-Control: no-store\r\nContent-Length: 8\r\nContent-Type: application/json\r\n"
	fields[1], fields[2], fields[3] = "Retry-After: ", "3", "\r\n"
	date := func(s string) string {
		i := strings.Index(s, "Date: ")
		j := strings.Index(s[i:], "\r\n")
		return s[:i+6] + "X" + s[i+j:]
	}
	for _, method := range []string{"GET", "HEAD"} {
		for _, closing := range []bool{false, true} {
			want := newTestResponse(method)
			want.req.Close = closing
			set(want.header)
			want.WriteHeader(429)
			want.Write(body)
			want.done = true
			want.commitPending()

			got := newTestResponse(method)
			got.req.Close = closing
			set(got.header)
			if !got.WriteWhole(429, fields, body) {
				t.Fatalf("%s close=%v: declined", method, closing)
			}
			if g, w := date(string(got.c.out)), date(string(want.c.out)); g != w {
				t.Errorf("%s close=%v: WriteWhole wrote\n%q\nWriteHeader and Write\n%q", method, closing, g, w)
			}
			if got.closeAfter != want.closeAfter || got.written != want.written || got.announced != want.announced {
				t.Errorf("%s close=%v: closeAfter %v written %d announced %d; want %v %d %d", method, closing,
					got.closeAfter, got.written, got.announced, want.closeAfter, want.written, want.announced)
			}
			if _, err := got.Write([]byte("x")); err != http.ErrContentLength {
				t.Errorf("%s close=%v: a write after WriteWhole: %v, want ErrContentLength", method, closing, err)
			}
		}
	}
	for _, tc := range []struct {
		name string
		code int
		prep func(*response)
	}{
		{"status-written", 429, func(w *response) { w.WriteHeader(200) }},
		{"hijacked", 429, func(w *response) { w.c.hijacked = true }},
		{"no-body-status", 204, nil},
		{"not-modified", 304, nil},
		{"informational", 103, nil},
		{"informational-199", 199, nil},
		{"below-100", 99, nil},
		{"above-999", 1000, nil},
	} {
		w := newTestResponse("GET")
		if tc.prep != nil {
			tc.prep(w)
		}
		before := len(w.c.out)
		if w.WriteWhole(tc.code, fields, body) {
			t.Errorf("%s: taken", tc.name)
		}
		if len(w.c.out) != before {
			t.Errorf("%s: declined, yet wrote %q", tc.name, w.c.out[before:])
		}
	}
}

// TestWriteSortedMany: a head of more fields than writeSorted sorts by
// index is sorted as well, as net/http sorts it.
func TestWriteSortedMany(t *testing.T) {
	for _, n := range []int{0, 1, 2, 63, 64, 65, 200} {
		h := http.Header{}
		for i := range n {
			h[http.CanonicalHeaderKey("x-f"+strings.Repeat("z", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26)))] = []string{"v"}
		}
		var want strings.Builder
		h.Write(&want)
		c := &conn{}
		c.writeFields(h, nil)
		if got := string(c.out); got != want.String() {
			t.Errorf("%d fields:\n%s\nwant\n%s", n, got, want.String())
		}
	}
}

// TestWriteWholeTooLarge: an answer that does not fit in the
// connection's buffer is declined, so that nothing is written before the
// handler returns.
func TestWriteWholeTooLarge(t *testing.T) {
	w := newTestResponse("GET")
	var fields [10]string
	fields[0] = "Content-Length: 8\r\nContent-Type: text/plain\r\n"
	fields[1] = "X-Long: " + strings.Repeat("a", cap(w.c.out)) + "\r\n"
	if w.WriteWhole(429, fields, []byte("12345678")) || len(w.c.out) != 0 {
		t.Errorf("an answer past the buffer taken: %d bytes written", len(w.c.out))
	}
	fields[1] = "X-Long: " + strings.Repeat("a", cap(w.c.out)-200) + "\r\n"
	if !w.WriteWhole(429, fields, []byte("12345678")) {
		t.Error("an answer that fits declined")
	}
	// Fields, body and the room for the status line, Date and Connection
	// that fill the buffer exactly: taken.
	w = newTestResponse("GET")
	const line = "X-Long: \r\n"
	fields[1] = "X-Long: " + strings.Repeat("a", cap(w.c.out)-wholeSlack-8-len(fields[0])-len(line)) + "\r\n"
	if !w.WriteWhole(429, fields, []byte("12345678")) {
		t.Error("an answer that fills the buffer exactly declined")
	}
}

// TestWriteWholeStatusRange: WriteWhole takes every status with a body,
// 200 to 999.
func TestWriteWholeStatusRange(t *testing.T) {
	var fields [10]string
	fields[0] = "Content-Length: 1\r\nContent-Type: text/plain\r\n"
	for _, code := range []int{200, 201, 429, 599, 998, 999} {
		if w := newTestResponse("GET"); !w.WriteWhole(code, fields, []byte("x")) {
			t.Errorf("%d declined", code)
		}
	}
}

// TestWriteWholeThenFinish: once the handler returns, an answer written
// with WriteWhole ends as the same answer written with WriteHeader and
// Write: the same bytes on the connection (Date aside), and the same
// decision to keep the connection.
func TestWriteWholeThenFinish(t *testing.T) {
	body := []byte("rate limited\n")
	set := func(h http.Header) {
		h["Content-Length"] = []string{"13"}
		h["Content-Type"] = []string{"text/plain"}
	}
	var fields [10]string
	fields[0] = "Content-Length: 13\r\nContent-Type: text/plain\r\n"
	for _, method := range []string{"GET", "HEAD"} {
		for _, closing := range []bool{false, true} {
			want := newTestResponse(method)
			wantConn := &sinkConn{}
			want.c.rwc = wantConn
			want.req.Close = closing
			set(want.header)
			want.WriteHeader(429)
			want.Write(body)
			wantKeep := want.finish()

			got := newTestResponse(method)
			gotConn := &sinkConn{}
			got.c.rwc = gotConn
			got.req.Close = closing
			set(got.header)
			if !got.WriteWhole(429, fields, body) {
				t.Fatalf("%s close=%v: declined", method, closing)
			}
			gotKeep := got.finish()
			g := dateValue.ReplaceAllString(gotConn.out.String(), "Date: <date>\r")
			w := dateValue.ReplaceAllString(wantConn.out.String(), "Date: <date>\r")
			if g != w || gotKeep != wantKeep {
				t.Errorf("%s close=%v: WriteWhole then finish sent\n%q (keep %v)\nWriteHeader, Write and finish\n%q (keep %v)", method, closing, g, gotKeep, w, wantKeep)
			}
		}
	}
}

// TestWriteHeadAllocatesNothing: a connection's next answer of the
// common kind (the proxy's 429: seven fields and a small body, written
// with WriteHeader and Write) allocates nothing: the head is written
// from the handler's map into the connection's buffer, with the sort's
// scratch space kept from one answer to the next.
func TestWriteHeadAllocatesNothing(t *testing.T) {
	bb := newBench429()
	answer := func() {
		w := bb.next()
		w.WriteHeader(429)
		w.Write(bb.body)
		w.done = true
		w.commitPending()
	}
	answer()
	if n := testing.AllocsPerRun(20, answer); n != 0 {
		t.Errorf("%v allocations an answer, want 0", n)
	}
}
