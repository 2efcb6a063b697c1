package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"strings"
)

// readSimpleResponse reads from br, without going back to the connection,
// a response head of the plainest common form, and reports false (having
// read nothing) for any other: then http.ReadResponse reads it. The form:
// the whole head already buffered, "HTTP/1.1", a status of 200 to 599 but
// 204 and 304 with a reason of visible ASCII, header lines "Name: value"
// ending in CRLF with token names and values of visible ASCII, spaces and
// tabs (no folded line), exactly one Content-Length of decimal digits, and
// no Transfer-Encoding, Trailer, Connection or Pragma (the fields that
// make ReadResponse's framing or headers differ from what was received);
// and a request other than HEAD. For such a head the response is the one
// http.ReadResponse returns, field for field, but for Body, which is nil:
// the body is the next n bytes of br, n its Content-Length (returned).
// The head takes one string and one array of values, where ReadResponse
// makes one string a line; the response comes with room for its body.
func readSimpleResponse(br *bufio.Reader, req *http.Request) (*syncResponse, int64, bool) {
	if req.Method == http.MethodHead {
		return nil, 0, false
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil, 0, false
	}
	head := buf[:end+2] // each line with its CRLF
	// The status line.
	const proto = "HTTP/1.1 "
	eol := bytes.IndexByte(head, '\n')
	if eol < 1 || head[eol-1] != '\r' {
		return nil, 0, false
	}
	line := head[:eol-1]
	if len(line) < len(proto)+3 || string(line[:len(proto)]) != proto {
		return nil, 0, false
	}
	code := 0
	for _, c := range line[len(proto) : len(proto)+3] {
		if c < '0' || c > '9' {
			return nil, 0, false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, 0, false
	}
	if rest := line[len(proto)+3:]; len(rest) > 0 {
		if rest[0] != ' ' || !visibleText(rest, false) {
			return nil, 0, false
		}
	}
	// The header lines: counted and checked first, so that nothing is
	// allocated for a head that is not of this form.
	lines := 0
	for rest := head[eol+1:]; len(rest) > 0; lines++ {
		i := bytes.IndexByte(rest, '\n')
		l := rest[:i]
		rest = rest[i+1:]
		if len(l) == 0 || l[len(l)-1] != '\r' {
			return nil, 0, false
		}
		l = l[:len(l)-1]
		colon := bytes.IndexByte(l, ':')
		if colon <= 0 || !token(l[:colon]) || !visibleText(l[colon+1:], true) {
			return nil, 0, false
		}
		if name := l[:colon]; bytes.EqualFold(name, []byte("Transfer-Encoding")) || bytes.EqualFold(name, []byte("Trailer")) ||
			bytes.EqualFold(name, []byte("Connection")) || bytes.EqualFold(name, []byte("Pragma")) {
			return nil, 0, false // they decide framing or change the header
		}
	}
	s := string(head) // the one string every part of the head is cut from
	h := make(http.Header, lines)
	vals := make([]string, lines)
	n := int64(-1)
	rest := s[eol+1:]
	for rest != "" {
		i := strings.IndexByte(rest, '\n')
		l := rest[:i-1]
		rest = rest[i+1:]
		colon := strings.IndexByte(l, ':')
		key := textproto.CanonicalMIMEHeaderKey(l[:colon])
		v := trimSpaceTab(l[colon+1:])
		if key == "Content-Length" {
			if n >= 0 || len(v) == 0 || len(v) > 18 {
				return nil, 0, false // repeated, empty or too long: ReadResponse decides
			}
			n = 0
			for j := 0; j < len(v); j++ {
				c := v[j]
				if c < '0' || c > '9' {
					return nil, 0, false
				}
				n = n*10 + int64(c-'0')
			}
		}
		if vv, ok := h[key]; ok {
			h[key] = append(vv, v)
			continue
		}
		vv := vals[:1:1]
		vals = vals[1:]
		vv[0] = v
		h[key] = vv
	}
	if n < 0 {
		return nil, 0, false // no Content-Length: delimited by the close
	}
	br.Discard(end + 4)
	return &syncResponse{resp: http.Response{
		Status: s[len(proto) : eol-1], StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: n, Request: req,
	}}, n, true
}

// syncResponse is a response readSimpleResponse read, with its body: one
// allocation for both.
type syncResponse struct {
	resp http.Response
	body syncBody
}

// token reports whether b is an HTTP token (RFC 9110 tchar), as a field
// name must be.
func token(b []byte) bool {
	for _, c := range b {
		if !tokenByte(c) {
			return false
		}
	}
	return len(b) > 0
}

func tokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// visibleText reports whether b holds visible ASCII and spaces only (and
// tabs, if tabs).
func visibleText(b []byte, tabs bool) bool {
	for _, c := range b {
		if (c < ' ' || c > '~') && !(tabs && c == '\t') {
			return false
		}
	}
	return true
}

// trimSpaceTab is s without leading and trailing spaces and tabs, as
// net/textproto trims a header value.
func trimSpaceTab(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
