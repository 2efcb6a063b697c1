package proxy

import (
	"errors"
	"net/http"
	"strings"

	"github.com/limitproxy/limitproxy/internal/httptoken"

	"github.com/limitproxy/limitproxy/policy/config"
)

// The request limitproxy matches and keys is the request the upstream
// receives. Before a request is matched, its path, method and host are
// brought to one canonical form, the matchers and the client key see that
// form, and the upstream is sent that same form; what has no safe canonical
// form is refused with 400. Without this a client could spell one path in
// a way a policy does not recognise (//login, /./login, /%6cogin) while the
// upstream, which normalizes on its own, serves the protected handler.

// Why a path is refused.
var (
	errNotPath     = errors.New("the request target is not an absolute path")
	errBadEscape   = errors.New("the path has a malformed percent-encoding")
	errNUL         = errors.New("the path contains a NUL byte")
	errEscapesRoot = errors.New("the path climbs above the root")
	errEncodedSep  = errors.New("the path has an encoded / or \\ that would make an empty, . or .. segment once decoded")
	errOverlong    = errors.New("the path has an overlong UTF-8 encoding, which some upstreams decode as another character")
	errFragment    = errors.New("the request target holds a '#': clients never send a fragment, and upstreams disagree on where the path ends")
)

// normalizePath returns the canonical form of an escaped request path (as
// sent on the request line, without the query), following RFC 3986's
// syntax-based normalization and what nginx and Envoy do before routing:
//
//   - percent-encodings of unreserved characters (ALPHA DIGIT - . _ ~) are
//     decoded, every other percent-encoding is kept with upper-case hex
//     digits, and a byte that may not appear bare in a path (space, '"',
//     '\\', a control or non-ASCII byte ...) is percent-encoded;
//   - "." and ".." segments are resolved (RFC 3986's remove_dot_segments) and repeated
//     slashes merged; a trailing slash is kept, since it names another
//     resource.
//
// It returns the escaped form to forward and its decoded form, which is
// what the matchers and the "path" key part see; decoding the first gives
// the second. It refuses (with an error saying why) a path that does not
// start with "/", that has a malformed escape or an encoded NUL, that
// climbs above the root, or whose encoded "/" (%2F) or "\" (%5C) would,
// once decoded by an upstream, make an empty, "." or ".." segment: an
// upstream that decodes them first would then resolve the path to one the
// matchers never saw. An encoded slash inside a segment that stays
// ordinary ("/repos/a%2Fb") is kept encoded and forwarded as it is.
//
// The result is idempotent: normalizing the escaped form returns it
// unchanged.
func normalizePath(escaped string) (raw, decoded string, err error) {
	if escaped == "" {
		return "/", "/", nil
	}
	if escaped[0] != '/' {
		return "", "", errNotPath
	}
	if isCanonicalPath(escaped) {
		// The common case, with no allocation: nothing to decode, no dot
		// segment, no repeated slash, only bytes that may appear bare.
		return escaped, escaped, nil
	}
	// segs holds the canonical escaped segments; a segment is a slice of
	// out. Decoding happens at the end, once.
	var segs []string
	rest := escaped[1:]
	trailing := false
	for {
		seg, after, more := strings.Cut(rest, "/")
		c, err := canonicalSegment(seg)
		if err != nil {
			return "", "", err
		}
		switch c {
		case "":
			// A repeated slash, or the end of a path that ends in one.
			trailing = !more
		case ".":
			trailing = !more
		case "..":
			if len(segs) == 0 {
				return "", "", errEscapesRoot
			}
			segs = segs[:len(segs)-1]
			trailing = !more
		default:
			segs = append(segs, c)
			trailing = false
		}
		if !more {
			break
		}
		rest = after
	}
	var b strings.Builder
	b.Grow(len(escaped))
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(s)
	}
	if trailing || len(segs) == 0 {
		b.WriteByte('/')
	}
	raw = b.String()
	return raw, unescapePath(raw), nil
}

// canonicalSegment returns the canonical escaped form of one path segment
// (see normalizePath). A segment that decodes to "." or ".." is returned as
// "." or "..".
func canonicalSegment(seg string) (string, error) {
	var b []byte // nil while seg is canonical as it is
	sep := false // seg has an encoded / or \
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c == '%':
			if i+2 >= len(seg) {
				return "", errBadEscape
			}
			hi, ok1 := httptoken.Unhex(seg[i+1])
			lo, ok2 := httptoken.Unhex(seg[i+2])
			if !ok1 || !ok2 {
				return "", errBadEscape
			}
			d := hi<<4 | lo
			if b == nil {
				b = append(make([]byte, 0, len(seg)), seg[:i]...)
			}
			switch {
			case d == 0:
				return "", errNUL
			case unreserved(d):
				b = append(b, d)
			default:
				if d == '/' || d == '\\' {
					sep = true
				}
				b = append(b, '%', upperHex[d>>4], upperHex[d&15])
			}
			i += 2
		case pathByte(c):
			if b != nil {
				b = append(b, c)
			}
		case c == 0:
			return "", errNUL
		default:
			if b == nil {
				b = append(make([]byte, 0, len(seg)+2), seg[:i]...)
			}
			if c == '\\' {
				sep = true
			}
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
		}
	}
	out := seg
	if b != nil {
		out = string(b)
	}
	if sep {
		// The segment as an upstream that decodes %2F and %5C first
		// would split it.
		for _, piece := range splitSeparators(unescapePath(out)) {
			if piece == "" || piece == "." || piece == ".." {
				return "", errEncodedSep
			}
		}
	}
	return out, nil
}

// splitSeparators splits s at every '/' and '\\', keeping empty pieces.
func splitSeparators(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] == '\\' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// isCanonicalPath reports whether p (starting with "/") is already in the
// form normalizePath returns and has no percent-encoding at all, so that it
// is its own decoded form.
func isCanonicalPath(p string) bool {
	prevSlash := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			if prevSlash {
				return false
			}
			prevSlash = true
			continue
		case c == '.':
			// A segment of "." or "..".
			if prevSlash {
				end := i + 1
				if end < len(p) && p[end] == '.' {
					end++
				}
				if end == len(p) || p[end] == '/' {
					return false
				}
			}
		case c == '%' || !pathByte(c):
			return false
		}
		prevSlash = false
	}
	return true
}

// pathByte reports whether c may appear bare in a canonical path segment:
// unreserved characters, sub-delims, ':' and '@' (RFC 3986 pchar), and '['
// and ']', which Go's URL parser and browsers leave as they are.
func pathByte(c byte) bool {
	if unreserved(c) {
		return true
	}
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '[', ']':
		return true
	}
	return false
}

// unreserved reports whether c is an RFC 3986 unreserved character.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

const upperHex = "0123456789ABCDEF"

// unescapePath decodes every percent-encoding of a canonical escaped path
// (which has only well-formed ones).
func unescapePath(s string) string {
	n := strings.Count(s, "%")
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)-2*n)
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, _ := httptoken.Unhex(s[i+1])
			lo, _ := httptoken.Unhex(s[i+2])
			b = append(b, hi<<4|lo)
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

// standardMethods are the methods RFC 9110 defines and RFC 5789's PATCH.
var standardMethods = [...]string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace,
}

// caseVariant reports whether method differs from a standard method only
// by case ("post", "Get"). Methods are case-sensitive (RFC 9110), and
// such a request would be matched as a method no policy names while an
// upstream that upper-cases methods (Flask, Werkzeug) serves it as the
// standard one, so it is refused.
func caseVariant(method string) bool {
	for _, m := range standardMethods {
		if method != m && strings.EqualFold(method, m) {
			return true
		}
	}
	return false
}

// normalizeHost returns a Host header value in the form host matching, the
// "host" key part and the upstream (with preserve_host) see: lower case,
// without the trailing dot of a fully qualified name, port kept.
// "API.Example.com.:8080" becomes "api.example.com:8080".
func normalizeHost(host string) string {
	name, port := host, ""
	if strings.HasPrefix(host, "[") {
		if i := strings.LastIndexByte(host, ']'); i > 0 {
			name, port = host[:i+1], host[i+1:]
		}
	} else if i := strings.LastIndexByte(host, ':'); i >= 0 {
		name, port = host[:i], host[i:]
	}
	trimmed := strings.TrimSuffix(name, ".")
	changed := len(trimmed) != len(name)
	name = trimmed
	for i := 0; i < len(name); i++ {
		if 'A' <= name[i] && name[i] <= 'Z' {
			name, changed = strings.ToLower(name), true
			break
		}
	}
	if !changed {
		return host
	}
	return name + port
}

// allowed is the Allow field of a 405: the methods limitproxy forwards to
// every upstream (others, extension methods included, pass too; TRACE only
// where allow_trace is set).
const allowed = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// canonicalize brings r's method, path and host to the canonical form in
// which they are matched, keyed and forwarded (see normalizePath), or
// returns the status and detail that refuse r: 405 for CONNECT (limitproxy
// is no forward proxy), 400 for a standard method in another case and for a
// path with no safe canonical form. The query is left exactly as received.
// Headers whose names hold an underscore are dropped unless the server
// allows them (underscores_in_headers).
func canonicalize(r *http.Request, s *config.Server) (status int, detail string) {
	if r.Method == http.MethodConnect {
		return http.StatusMethodNotAllowed, "CONNECT is not served: limitproxy is a reverse proxy"
	}
	if caseVariant(r.Method) {
		return http.StatusBadRequest, "the method " + r.Method + " is a standard method in the wrong case (methods are case-sensitive)"
	}
	var escaped string
	if strings.HasPrefix(r.RequestURI, "/") {
		// Origin form (nearly every request): the path exactly as it came
		// on the request line, since EscapedPath re-encodes a path Go
		// finds unusual and would lose the difference between / and %2F.
		escaped, _, _ = strings.Cut(r.RequestURI, "?")
	} else {
		escaped = r.URL.EscapedPath()
	}
	if strings.IndexByte(r.RequestURI, '#') >= 0 {
		// Go reads it as part of the path (or the query), Werkzeug,
		// Node's URL and Express as the start of a fragment they drop.
		return http.StatusBadRequest, errFragment.Error()
	}
	raw, decoded, err := normalizePath(escaped)
	if err == nil && overlong(decoded) {
		err = errOverlong
	}
	if err != nil {
		return http.StatusBadRequest, err.Error()
	}
	r.URL.Path = decoded
	r.URL.RawPath = ""
	if raw != decoded {
		r.URL.RawPath = raw
	}
	r.Host = normalizeHost(r.Host)
	if !s.UnderscoresInHeaders {
		dropUnderscoreHeaders(r.Header)
	}
	return 0, ""
}

// dropUnderscoreHeaders removes every request header whose name holds an
// underscore, as nginx does by default (underscores_in_headers off). CGI,
// WSGI, Rack and PHP turn both X-Api-Key and X_Api_Key into HTTP_X_API_KEY,
// so a client could send its real key under one spelling, which the
// upstream reads, and a fresh junk key under the other, which limitproxy
// keys by.
func dropUnderscoreHeaders(h http.Header) {
	for name := range h {
		if strings.IndexByte(name, '_') >= 0 {
			delete(h, name)
		}
	}
}

// overlong reports whether s holds an overlong UTF-8 sequence: a lead
// byte 0xC0 or 0xC1, or 0xE0 or 0xF0 followed by a byte that makes the
// sequence longer than the code point needs (%C0%AF is a '/' to a decoder
// that does not check, as old IIS was).
func overlong(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0xC0:
		case c == 0xC0 || c == 0xC1:
			return true
		case c == 0xE0 && i+1 < len(s) && 0x80 <= s[i+1] && s[i+1] < 0xA0:
			return true
		case c == 0xF0 && i+1 < len(s) && 0x80 <= s[i+1] && s[i+1] < 0x90:
			return true
		}
	}
	return false
}
