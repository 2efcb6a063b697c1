package h1

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// head is a request head the front serves itself: what parseHead found
// in the bytes before the blank line. Its strings share one allocation,
// the head's text.
type head struct {
	method, target string
	url            *url.URL
	header         http.Header
	vals           []string // header's values, one array
	u              url.URL  // url's storage when simpleURL reads it
	host           string
	close          bool // Connection: close
}

// maxFields bounds the header fields a head served here may carry; a
// head with more is handed to net/http, which has its own bound.
const maxFields = 64

// parseHead parses b, a request head that ends with its blank line
// ("\r\n\r\n" included), into h, and reports whether the front serves
// it. It accepts a strict subset of what net/http's server accepts, and
// reads what it accepts exactly as net/http reads it (the differential
// test and fuzzer in parse_test.go hold it to that):
//
//   - a request line "METHOD SP origin-form SP HTTP/1.1" (origin-form: a
//     target that starts with "/");
//   - field lines "name: value" that end in CRLF (no bare LF or CR, no
//     obs-fold, no whitespace before the colon), names of token
//     characters, values without control characters but HTAB;
//   - exactly one Host field, valid as net/http's server checks it;
//   - no body: no Transfer-Encoding, and no Content-Length but one "0";
//   - no Expect, Upgrade or Trailer field, nothing HTTP/2.
//
// Anything else is not an error here: the connection goes to net/http,
// which answers it (400, 431, 501…) or serves it as it always did.
func parseHead(b []byte, h *head) bool {
	// Cheap checks on the bytes first, so that nothing is allocated for a
	// head handed over.
	line, rest, ok := cutCRLF(b)
	if !ok {
		return false
	}
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return false
	}
	sp2 := sp1 + 1 + bytes.IndexByte(line[sp1+1:], ' ')
	if sp2 <= sp1+1 || !bytes.Equal(line[sp2+1:], []byte("HTTP/1.1")) {
		return false
	}
	for _, c := range line[:sp1] {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	if line[sp1+1] != '/' {
		return false // absolute-form, authority-form, asterisk-form
	}
	for _, c := range line[sp1+1 : sp2] {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	fields := 0
	for r := rest; ; {
		l, next, ok := cutCRLF(r)
		if !ok {
			return false
		}
		if len(l) == 0 {
			if len(next) != 0 {
				return false // b is one head, nothing after it
			}
			break
		}
		if !validField(l) {
			return false
		}
		if fields++; fields > maxFields {
			return false
		}
		r = next
	}

	// Accepted so far: build the request's strings from one copy.
	s := string(b)
	h.method = internMethod(s[:sp1])
	h.target = s[sp1+1 : sp2]
	u := simpleURL(h.target, &h.u)
	if u == nil {
		var err error
		if u, err = url.ParseRequestURI(h.target); err != nil {
			return false
		}
	}
	h.url = u
	// The map and the values' array are the connection's, used again for
	// each of its requests (a handler must not keep a request past
	// ServeHTTP).
	hdr := h.header
	if hdr == nil {
		hdr = make(http.Header, fields)
	} else {
		clear(hdr)
	}
	if cap(h.vals) < fields {
		h.vals = make([]string, max(fields, 8))
	}
	vals := h.vals[:fields]
	nHost, clen := 0, false
	host := ""
	var pragma, connection []string
	off := len(line) + 2
	for i := 0; ; i++ {
		end := off + strings.Index(s[off:], "\r\n")
		if end == off {
			break
		}
		l := s[off:end]
		off = end + 2
		colon := strings.IndexByte(l, ':')
		name := textproto.CanonicalMIMEHeaderKey(l[:colon])
		v := textproto.TrimString(l[colon+1:])
		switch name {
		case "Host":
			// Not in the map: net/http's server deletes it.
			nHost++
			if !httpguts.ValidHostHeader(v) {
				return false
			}
			host = v
			continue
		case "Content-Length":
			if clen || v != "0" {
				return false
			}
			clen = true
		case "Transfer-Encoding", "Expect", "Upgrade", "Trailer", "Http2-Settings":
			return false
		}
		vals[i] = v
		var vs []string
		if old, ok := hdr[name]; ok {
			vs = append(old, v)
		} else {
			vs = vals[i : i+1 : i+1]
		}
		hdr[name] = vs
		switch name {
		case "Pragma":
			pragma = vs
		case "Connection":
			connection = vs
		}
	}
	if nHost != 1 {
		return false
	}
	h.host = u.Host // "" for origin-form
	if h.host == "" {
		h.host = host
	}
	// As net/http's readRequest: a lone "Pragma: no-cache" implies
	// "Cache-Control: no-cache".
	if len(pragma) > 0 && pragma[0] == "no-cache" {
		if _, ok := hdr["Cache-Control"]; !ok {
			hdr["Cache-Control"] = []string{"no-cache"}
		}
	}
	h.header = hdr
	h.close = httpguts.HeaderValuesContainsToken(connection, "close")
	return true
}

// simpleURL returns what url.ParseRequestURI returns for target when its
// path is of unreserved characters and slashes only (the common case),
// without parsing: the path as is (nothing to unescape, so no RawPath),
// and the query after the first "?" (ForceQuery when a lone "?" ends
// it). nil: parse it. FuzzParseHead holds it to url.ParseRequestURI.
func simpleURL(target string, u *url.URL) *url.URL {
	path, query, hasQuery := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		c := path[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
			return nil
		}
	}
	*u = url.URL{Path: path, RawQuery: query}
	if hasQuery && query == "" {
		u.ForceQuery = true
	}
	return u
}

// cutCRLF splits b at its first line end, which must be CRLF. A bare
// LF reports false; a bare CR before it stays in the line, where the
// line's own checks refuse it (no line the front accepts holds a control
// character but HTAB).
func cutCRLF(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}

// validField reports whether l is a field line the front accepts: a
// token name, a colon, and a value of visible characters, SP, HTAB and
// obs-text.
func validField(l []byte) bool {
	colon := bytes.IndexByte(l, ':')
	if colon <= 0 {
		return false
	}
	for _, c := range l[:colon] {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	for _, c := range l[colon+1:] {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// internMethod returns the common methods as constants, so that a
// request's method does not keep its head's text alive.
func internMethod(m string) string {
	switch m {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	case http.MethodPatch:
		return http.MethodPatch
	}
	return m
}
