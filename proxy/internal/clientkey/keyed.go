package clientkey

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/limitproxy/limitproxy/internal/httptoken"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// A keyed cookie or query parameter is a key only when every upstream
// reads the value it was keyed by. Upstreams do not agree on a repeated
// or malformed one: Go's Request.Cookie skips a cookie whose value it
// finds malformed and takes the next of that name, url.ParseQuery drops a
// pair with a bad escape or a ';'; Werkzeug (Flask), nginx's $cookie_ and
// $arg_, Go and PHP's $_COOKIE read the first, PHP's $_GET, Django, Rails
// and Python's SimpleCookie the last; nginx matches names without regard
// to case, PHP decodes cookie names and reads '.' and ' ' in a name as
// '_', SimpleCookie and nginx take white space or a comma inside a cookie
// pair as the start of another. So a request with any of these around its
// keyed name is ambiguous (Ambiguous): refused, or with
// ambiguous_key_parts = "rewrite" keyed by the last well-formed value and
// forwarded with only that one (Rewrite).

// State is what a request holds of one key part.
type State uint8

// The states.
const (
	Absent    State = iota // not there, or empty: on_missing applies
	Present                // exactly one well-formed value
	Ambiguous              // a keyed cookie or parameter repeated or malformed
)

// occurrence is one place a request names a keyed cookie or parameter,
// in any spelling an upstream may read as that name.
type occurrence struct {
	line  int    // index of the Cookie field line; 0 for a query
	piece int    // index of its ';'-separated cookie pair, or '&'-separated query pair
	ok    bool   // spelled exactly, and its value well-formed
	value string // its value as keyed, when ok
}

// Keyed returns the value of the cookie or query part of r, with what
// ambiguity does in mode.
func Keyed(r *http.Request, part config.KeyPart, mode config.AmbiguousMode) (string, State) {
	var occ []occurrence
	var stack [4]occurrence
	switch part.Kind {
	case config.KeyCookie:
		occ = cookieOccurrences(stack[:0], r.Header["Cookie"], part.Name)
	case config.KeyQuery:
		occ = queryOccurrences(stack[:0], r.URL.RawQuery, part.Name)
	default:
		return "", Absent
	}
	c, st := choose(occ, mode)
	if st != Present {
		return "", st
	}
	return occ[c].value, Present
}

// choose picks the occurrence a key reads: the only one, if it is
// well-formed; with rewrite, the last well-formed one (-1: none). An
// empty value is absent.
func choose(occ []occurrence, mode config.AmbiguousMode) (int, State) {
	switch {
	case len(occ) == 0:
		return -1, Absent
	case len(occ) == 1 && occ[0].ok:
		if occ[0].value == "" {
			return 0, Absent
		}
		return 0, Present
	case mode != config.AmbiguousRewrite:
		return -1, Ambiguous
	}
	for i := len(occ) - 1; i >= 0; i-- {
		if occ[i].ok {
			if occ[i].value == "" {
				return i, Absent
			}
			return i, Present
		}
	}
	return -1, Absent
}

// cookieOccurrences appends to occ each place the Cookie field lines
// name the cookie name. Pairs are split at ';' (every parser does; those
// that honour quotes only join pieces, so they see no name this misses).
// A pair names it when its name, or a word of it after white space or a
// comma, reads as name (sameName). It is ok when it is exactly
// name=cookie-value (RFC 6265: optionally in double quotes, no white
// space, comma, quote or backslash); its value is then keyed without the
// quotes, percent-decoded and with '+' as a space, so that every spelling
// an upstream may decode to one value (PHP and Rack decode cookie values,
// Go and Werkzeug do not) shares one key.
func cookieOccurrences(occ []occurrence, lines []string, name string) []occurrence {
	for li, line := range lines {
		for pi := 0; line != ""; pi++ {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			pair = strings.Trim(pair, " \t")
			if pair == "" {
				continue
			}
			n, v, eq := strings.Cut(pair, "=")
			if sameName(n, name) {
				o := occurrence{line: li, piece: pi}
				if eq && n == name && validCookieValue(v) {
					o.ok = true
					o.value = cookieKeyValue(v)
				}
				occ = append(occ, o)
				continue
			}
			// A pair of another name: any word after white space or a
			// comma starts a pair for SimpleCookie or nginx.
			if i := strings.IndexAny(pair, " \t,"); i >= 0 {
				for _, w := range strings.FieldsFunc(pair[i:], func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }) {
					wn, _, _ := strings.Cut(w, "=")
					if sameName(wn, name) {
						occ = append(occ, occurrence{line: li, piece: pi})
						break
					}
				}
			}
		}
	}
	return occ
}

// validCookieValue reports whether v is an RFC 6265 cookie-value.
func validCookieValue(v string) bool {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\' {
			return false
		}
	}
	return true
}

// cookieKeyValue is the key of a valid cookie-value v: without its
// quotes, %XX decoded (other '%' kept), and '+' read as a space.
func cookieKeyValue(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if !strings.ContainsAny(v, "%+") {
		return v
	}
	return strings.ReplaceAll(lenientUnescape(v), "+", " ")
}

// queryOccurrences appends to occ each place rawQuery names the
// parameter name. Pairs are split at '&', and at ';' too (which older
// parsers took as a separator); a pair names it when its name reads as
// name (sameName) percent-decoded or not. It is ok when its decoded name
// is exactly name, it holds no ';' (Go drops such a pair, others do not)
// and its value's percent-encoding is valid (Go drops a pair whose is
// not, others keep it); its value is keyed decoded, '+' as a space, as
// url.ParseQuery, Werkzeug and PHP decode it.
func queryOccurrences(occ []occurrence, rawQuery, name string) []occurrence {
	for pi, rest := 0, rawQuery; rest != ""; pi++ {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		semi := strings.Contains(pair, ";")
		for sub := pair; sub != ""; {
			var one string
			one, sub, _ = strings.Cut(sub, ";")
			n, v, _ := strings.Cut(one, "=")
			if !sameName(n, name) {
				continue
			}
			o := occurrence{piece: pi}
			if !semi {
				dn, err := url.QueryUnescape(n)
				dv, verr := url.QueryUnescape(v)
				if err == nil && verr == nil && dn == name {
					o.ok, o.value = true, dv
				}
			}
			occ = append(occ, o)
		}
	}
	return occ
}

// sameName reports whether an upstream may read the cookie or parameter
// name n as name: compared without regard to ASCII case (nginx), after
// percent-decoding with '+' as a space (Go, PHP, Werkzeug decode query
// names, PHP cookie names too) or not (nginx), up to a '[' (PHP's
// arrays) or a NUL byte (PHP reads a name as a C string: k%00junk is k),
// without surrounding white space, with '.' and ' ' read as '_' (PHP).
func sameName(n, name string) bool {
	if foldedEqual(n, name) {
		return true
	}
	if strings.ContainsAny(n, "%+") {
		return foldedEqual(lenientUnescape(n), name)
	}
	return false
}

func foldedEqual(n, name string) bool {
	if i := strings.IndexByte(n, 0); i >= 0 {
		n = n[:i]
	}
	if i := strings.IndexByte(n, '['); i >= 0 {
		n = n[:i]
	}
	n = strings.Trim(n, " \t")
	if len(n) != len(name) {
		return false
	}
	for i := 0; i < len(n); i++ {
		if foldNameByte(n[i]) != foldNameByte(name[i]) {
			return false
		}
	}
	return true
}

func foldNameByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '.' || c == ' ':
		return '_'
	}
	return c
}

// lenientUnescape decodes each %XX of s and '+' as a space, keeping a
// '%' that starts no escape, as PHP and Werkzeug do.
func lenientUnescape(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s):
			hi, ok1 := httptoken.Unhex(s[i+1])
			lo, ok2 := httptoken.Unhex(s[i+2])
			if !ok1 || !ok2 {
				b = append(b, c)
				continue
			}
			b = append(b, hi<<4|lo)
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// AmbiguousPart returns the first cookie or query part of p's keys that
// r holds ambiguously (refused in mode), for the answer to name it.
func AmbiguousPart(r *http.Request, p *policy.Policy, mode config.AmbiguousMode) string {
	all := [][]config.KeyPart{p.Key}
	for _, lk := range p.LimitKeys {
		all = append(all, lk.Parts)
	}
	for _, parts := range all {
		for _, part := range parts {
			if _, st := Keyed(r, part, mode); st == Ambiguous {
				return part.String()
			}
		}
	}
	return Names(p)
}

// Rewrite leaves in r, for each cookie or query part of p's keys
// (its own, its limits'), only the occurrence the key was read from, or
// none when the part was absent: every other pair that names it is
// removed from the Cookie field lines or the query, the rest kept byte
// for byte. A request that names each part once, well-formed, is left as
// it is. Only with ambiguous_key_parts = "rewrite": otherwise such a
// request was refused.
func Rewrite(r *http.Request, p *policy.Policy) {
	rewriteParts(r, p.Key)
	for _, lk := range p.LimitKeys {
		rewriteParts(r, lk.Parts)
	}
}

func rewriteParts(r *http.Request, parts []config.KeyPart) {
	var stack [4]occurrence
	for _, part := range parts {
		switch part.Kind {
		case config.KeyCookie:
			occ := cookieOccurrences(stack[:0], r.Header["Cookie"], part.Name)
			if c, _ := choose(occ, config.AmbiguousRewrite); len(occ) > 1 || len(occ) == 1 && c != 0 {
				removeCookies(r.Header, occ, c)
			}
		case config.KeyQuery:
			occ := queryOccurrences(stack[:0], r.URL.RawQuery, part.Name)
			if c, _ := choose(occ, config.AmbiguousRewrite); len(occ) > 1 || len(occ) == 1 && c != 0 {
				r.URL.RawQuery = removePieces(r.URL.RawQuery, '&', occ, 0, c)
			}
		}
	}
}

// removeCookies removes from h's Cookie field lines the pairs of occ but
// its keep'th (-1: all of them); a line left empty goes.
func removeCookies(h http.Header, occ []occurrence, keep int) {
	lines := h["Cookie"]
	out := lines[:0:0]
	for li, line := range lines {
		line = strings.TrimLeft(removePieces(line, ';', occ, li, keep), " \t")
		if strings.Trim(line, " \t;") != "" {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		delete(h, "Cookie")
		return
	}
	h["Cookie"] = out
}

// removePieces returns s without the sep-separated pieces that the
// occurrences of occ on line hold, but occ[keep]'s.
func removePieces(s string, sep byte, occ []occurrence, line, keep int) string {
	drop := func(pi int) bool {
		for _, o := range occ {
			if o.line == line && o.piece == pi && (keep < 0 || occ[keep].line != line || occ[keep].piece != pi) {
				return true
			}
		}
		return false
	}
	var b strings.Builder
	first := true
	for pi, rest := 0, s; ; pi++ {
		piece, more, found := strings.Cut(rest, string(sep))
		if !drop(pi) {
			if !first {
				b.WriteByte(sep)
			}
			b.WriteString(piece)
			first = false
		}
		if !found {
			break
		}
		rest = more
	}
	return b.String()
}
