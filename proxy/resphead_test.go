package proxy

import (
	"bufio"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// simpleRead runs readSimpleResponse over raw, as buffered by a reader
// that has read it all, and returns the response with its Body (the next
// n bytes) and what was left unread.
func simpleRead(t *testing.T, raw, method string) (resp *http.Response, body, rest string, ok bool) {
	t.Helper()
	br := bufio.NewReaderSize(strings.NewReader(raw), 4096)
	br.Peek(1) // fills the buffer, as the transport's Peek does
	buffered := br.Buffered()
	sr, n, ok := readSimpleResponse(br, &http.Request{Method: method})
	if !ok {
		if br.Buffered() != buffered {
			t.Fatalf("%q: declined, yet read %d bytes", raw, buffered-br.Buffered())
		}
		return nil, "", "", false
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		b = nil
	}
	r, _ := io.ReadAll(br)
	return &sr.resp, string(b), string(r), true
}

// stdRead is http.ReadResponse over raw: the response with its body read
// whole (nil if reading it failed), and what was left unread.
func stdRead(raw, method string) (resp *http.Response, body, rest string, err error) {
	br := bufio.NewReaderSize(strings.NewReader(raw), 4096)
	resp, err = http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return nil, "", "", err
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", "", err
	}
	r, _ := io.ReadAll(br)
	return resp, string(b), string(r), nil
}

// checkSimpleResponse fails t when readSimpleResponse reads raw otherwise
// than http.ReadResponse: every field of the response (Body aside), its
// body, and where the next response starts. It reports whether
// readSimpleResponse took raw.
func checkSimpleResponse(t *testing.T, raw, method string) bool {
	t.Helper()
	got, gotBody, gotRest, ok := simpleRead(t, raw, method)
	if !ok {
		return false
	}
	want, wantBody, wantRest, err := stdRead(raw, method)
	if err != nil {
		// A body cut short: the head must still be ReadResponse's.
		if gotBody != "" {
			t.Errorf("%q: ReadResponse fails (%v), readSimpleResponse reads a whole body", raw, err)
		}
		return true
	}
	got.Body, want.Body = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q:\n readSimpleResponse %+v\n http.ReadResponse  %+v", raw, got, want)
	}
	if gotBody != wantBody || gotRest != wantRest {
		t.Errorf("%q: body %q then %q, want %q then %q", raw, gotBody, gotRest, wantBody, wantRest)
	}
	return true
}

// TestReadSimpleResponse: the heads of the common form are read by
// readSimpleResponse, exactly as http.ReadResponse reads them; the others
// are left to it.
func TestReadSimpleResponse(t *testing.T) {
	taken := []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\n",
		"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Wed, 25 Nov 2026 03:00:00 GMT\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 5\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nX-Empty:\r\nX-Spaces: \t a b \t\r\n\r\nhello",
		"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\nno!next",
		"HTTP/1.1 599\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 500 Internal Server Error \r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
	}
	for _, raw := range taken {
		if !checkSimpleResponse(t, raw, "GET") {
			t.Errorf("%q: left to http.ReadResponse", raw)
		}
	}
	declined := []struct{ raw, method string }{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "HEAD"},
		{"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", "GET"},
		{"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", "GET"},
		{"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "GET"},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "GET"},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close", "GET"},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "GET"},
		{"HTTP/1.1 200 OK\r\nconnection: close\r\nContent-Length: 0\r\n\r\n", "GET"},
		{"HTTP/1.1 200 OK\r\nPRAGMA: no-cache\r\nContent-Length: 0\r\n\r\n", "GET"},
		{"HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 0\r\n\r\n", "GET"},
		{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", "GET"},
		{"HTTP/1.1 200 OK\r\nContent-Length: 0x1\r\n\r\nx", "GET"},
		{"HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\nContent-Length: 0\r\n\r\n", "GET"},
		{"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", "GET"},
		{"\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "GET"},
		{"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", "GET"}, // the head not all here
	}
	for _, d := range declined {
		if _, _, _, ok := simpleRead(t, d.raw, d.method); ok {
			t.Errorf("%s %q: read by readSimpleResponse", d.method, d.raw)
		}
	}
}

// FuzzReadSimpleResponse: whatever an upstream sends, a head that
// readSimpleResponse takes is read as http.ReadResponse reads it.
func FuzzReadSimpleResponse(f *testing.F) {
	for _, s := range responseShapes {
		f.Add(s.resp)
	}
	f.Add("HTTP/1.1 200 OK\r\nA: 1\r\na: 2\r\nB:\t\r\nContent-Length: 2\r\n\r\nokHTTP/1.1")
	f.Fuzz(func(t *testing.T, raw string) {
		checkSimpleResponse(t, raw, "GET")
	})
}
