package proxy

import (
	"bytes"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/limitproxy/limitproxy/internal/httptoken"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// Readings. limitproxy matches the canonical form of a path
// (normalizePath), but the upstream routes by its own rules, and common
// upstreams read one path in ways that canonical form cannot settle for
// all of them at once: a servlet container drops `;` parameters
// (/login;x=1 is its /login), IIS reads a decoded backslash as a slash and
// drops trailing dots and spaces (/login. is its /login), Express,
// ASP.NET Core and IIS route without regard to case, Express and
// ASP.NET Core take /login/ for /login, and behind forward auth, where
// the front proxy passes the client's target as it came, Werkzeug and
// Express do not resolve dot segments (/api/x/../../y is under their
// /api/), and WHATWG URL against a base (Node's new URL(req.url, base))
// keeps empty segments and reads a leading // as a host (//x/login is
// its /login). Each such rule gives a reading of the path. A request is decided
// only if every reading (each rule that changes the path, and every
// combination of them) selects the policy the canonical form selects:
// where two upstreams would route it under different policies, no one
// choice of limitproxy's is safe for both, so the request is refused
// (docs/security-model.md has the table). The path key part is the
// fullest reading (every rule but verbatim applied), so that spellings one
// upstream routes alike make one key.

// rule is one way an upstream reads a path otherwise than the canonical
// form.
type rule uint8

const (
	ruleParams    rule = 1 << iota // ';' parameters dropped from each segment (Tomcat, Jetty, Spring)
	ruleBackslash                  // a backslash, bare or %5C, is a '/' (IIS; WHATWG URL for a bare one)
	ruleTrailing                   // trailing dots and spaces dropped from each segment (IIS, Windows)
	ruleFold                       // case ignored (Express, ASP.NET Core, IIS); off with case_sensitive_paths
	ruleSlash                      // one trailing '/' ignored (Express, ASP.NET Core, Spring 5); only against exact paths
	ruleVerbatim                   // dot segments and repeated slashes as sent (Werkzeug, Express): forward auth only
	ruleAddSlash                   // a trailing '/' added (Express, ASP.NET Core serve /account as /account/); only against exact paths and regexes
	ruleURL                        // WHATWG URL against a base (Node's new URL(target, base)), PHP's parse_url: a leading // starts a host, dot segments resolved, empty ones kept: forward auth only

	ruleCount = 8
)

// ruleNames name the rules in a refusal's detail.
var ruleNames = [ruleCount]string{
	"with its ;parameters dropped (servlet containers)",
	"with a backslash read as / (IIS, WHATWG URL)",
	"with trailing dots and spaces dropped (IIS)",
	"in another case (Express, ASP.NET Core, IIS)",
	"without its trailing slash (Express, ASP.NET Core, Spring)",
	"as sent, dot segments unresolved (Werkzeug, Express)",
	"with a trailing slash (Express, ASP.NET Core)",
	"as WHATWG URL reads it against a base, a leading // a host, empty segments kept (Node's new URL, PHP's parse_url)",
}

// rules returns the rules that change the path whose canonical escaped
// form is esc and whose escaped form as the upstream receives it is sent
// (esc itself on the proxy face; the target as the client sent it behind
// forward auth). fold is false where the server says paths are
// case-sensitive; cased that some policy's path is written with a letter
// that has another case (policy.Set.CasedPaths), so that even a path in
// lower case may match it in another case. A path of lower-case letters,
// digits, '/', '-', '_' and inner dots, the usual one, has none, found in
// one pass.
func rules(esc, sent string, fold, cased bool) rule {
	var rs rule
	if fold && cased {
		rs |= ruleFold
	}
	for i := 0; i < len(esc); i++ {
		c := esc[i]
		switch {
		case c == ';':
			rs |= ruleParams
		case c == '%':
			if i+2 < len(esc) && esc[i+1] == '5' && (esc[i+2] == 'C' || esc[i+2] == 'c') {
				rs |= ruleBackslash
			}
			if i+2 < len(esc) && esc[i+1] == '2' && esc[i+2] == '0' && (i+3 == len(esc) || esc[i+3] == '/' || esc[i+3] == '%' || esc[i+3] == '.' || esc[i+3] == ';') {
				rs |= ruleTrailing
			}
			if fold && i+1 < len(esc) && esc[i+1] >= '8' {
				rs |= ruleFold // a non-ASCII letter may have another case
			}
		case c == '\\':
			rs |= ruleBackslash
		case c == '.':
			if i+1 == len(esc) || esc[i+1] == '/' || esc[i+1] == ';' {
				rs |= ruleTrailing
			}
		case fold && ('A' <= c && c <= 'Z' || c >= 0x80):
			// c >= 0x80: a non-ASCII letter as sent, raw (behind forward
			// auth); the canonical form has it percent-encoded.
			rs |= ruleFold
		}
	}
	if len(esc) > 1 && esc[len(esc)-1] == '/' || dotEnd(esc) {
		// A dot segment at the end (in a target as sent) is read as a
		// trailing slash where dot segments are resolved.
		rs |= ruleSlash
	}
	if sent != esc {
		rs |= ruleVerbatim
		if emptySegment(sent) {
			// Otherwise WHATWG URL reads sent as the other readings
			// (dots resolved, a backslash a slash) do.
			rs |= ruleURL
		}
	}
	return rs
}

// dotEnd reports whether the last segment of the escaped path p is a
// dot segment: ".", "..", or either spelled with %2E.
func dotEnd(p string) bool {
	seg := p[strings.LastIndexByte(p, '/')+1:]
	dots := 0
	for len(seg) > 0 && dots < 3 {
		switch {
		case seg[0] == '.':
			seg = seg[1:]
		case len(seg) >= 3 && seg[0] == '%' && seg[1] == '2' && (seg[2] == 'e' || seg[2] == 'E'):
			seg = seg[3:]
		default:
			return false
		}
		dots++
	}
	return len(seg) == 0 && (dots == 1 || dots == 2)
}

// emptySegment reports whether the target sent has two separators in a
// row ('/' or '\', as WHATWG URL reads an http URL's): an empty segment,
// or at its start a host to WHATWG URL.
func emptySegment(sent string) bool {
	for i := 1; i < len(sent); i++ {
		if (sent[i] == '/' || sent[i] == '\\') && (sent[i-1] == '/' || sent[i-1] == '\\') {
			return true
		}
	}
	return false
}

// hostEnd is where the path of sent begins as WHATWG URL reads it
// against a base: after "//host" when sent starts with two separators
// (more are skipped, as its "special authority ignore slashes" state
// does), else 0. "//login" has an empty path, read as "/".
func hostEnd(sent string) int {
	sep := func(c byte) bool { return c == '/' || c == '\\' }
	if len(sent) < 2 || !sep(sent[0]) || !sep(sent[1]) {
		return 0
	}
	i := 2
	for i < len(sent) && sep(sent[i]) {
		i++
	}
	for i < len(sent) && !sep(sent[i]) {
		i++
	}
	return i
}

// read returns the decoded path an upstream reading by the rules rs sees
// in sent (escaped, as it receives it), and false if, so read, the path
// climbs above the root. It writes the path into buf (grown to
// len(sent)+1 if smaller) and returns it as a view of buf, valid until
// buf is written again: one pass over sent and one over the decoded
// bytes, in place, whatever the rules, so that reading a path costs
// about what copying it does.
func read(buf []byte, sent string, rs rule) ([]byte, bool) {
	if cap(buf) < len(sent)+1 {
		buf = make([]byte, 0, len(sent)+1)
	}
	b := buf[:0]
	url := rs&ruleURL != 0 && rs&ruleVerbatim == 0
	start := 0
	if url {
		start = hostEnd(sent)
	}
	// Decode, cutting each segment's parameters at a bare ';' (an
	// upstream decodes after cutting them), and read a backslash, bare
	// or decoded, as a '/' (WHATWG URL a bare one).
	params := false
	for i := start; i < len(sent); i++ {
		c := sent[i]
		if c == '\\' && url {
			c = '/'
		}
		if c == '/' {
			params = false
			b = append(b, '/')
			continue
		}
		if params {
			continue
		}
		if c == ';' && rs&ruleParams != 0 {
			params = true
			continue
		}
		if c == '%' && i+2 < len(sent) {
			hi, ok1 := httptoken.Unhex(sent[i+1])
			lo, ok2 := httptoken.Unhex(sent[i+2])
			if ok1 && ok2 {
				c = hi<<4 | lo
				i += 2
			}
		}
		if c == '\\' && rs&ruleBackslash != 0 {
			c = '/'
		}
		b = append(b, c)
	}
	// Segment by segment, in place (what is written never passes what is
	// read): trailing dots and spaces dropped, and unless verbatim, "."
	// and ".." resolved and empty segments merged (kept by WHATWG URL, for
	// which ".." at the root stays there).
	verbatim := rs&ruleVerbatim != 0
	w, trailing := 0, false
	for i := 0; i < len(b); {
		j := i + 1
		for j < len(b) && b[j] != '/' {
			j++
		}
		seg := b[i+1 : j]
		if b[i] != '/' {
			seg = b[i:j] // a target not starting with '/'
		}
		dots := string(seg) == "." || string(seg) == ".."
		empty := len(seg) == 0
		if rs&ruleTrailing != 0 && !dots {
			seg = bytes.TrimRight(seg, ". ")
		}
		switch {
		case verbatim, url && empty:
			b[w] = '/'
			w++
			w += copy(b[w:], seg)
			trailing = false
		case len(seg) == 0 || string(seg) == ".":
			trailing = true
		case string(seg) == "..":
			if w == 0 && !url {
				return nil, false
			}
			w = max(bytes.LastIndexByte(b[:w], '/'), 0)
			trailing = true
		default:
			b[w] = '/'
			w++
			w += copy(b[w:], seg)
			trailing = false
		}
		i = j
	}
	if !verbatim && (trailing || w == 0) {
		b = append(b[:w], '/')
		w++
	}
	if rs&ruleSlash != 0 && w > 1 && b[w-1] == '/' {
		w--
	}
	if rs&ruleAddSlash != 0 && (w == 0 || b[w-1] != '/') {
		b = append(b[:w], '/')
		w++
	}
	return b[:w], true
}

// maxReadPath is the longest path, in bytes as the upstream receives it,
// that is read by the rules: each of up to 63 readings (95 behind
// forward auth, for a target with an empty segment) costs a pass over it
// and a match (about 4 ns a byte each), so a longer one that has any
// other reading is refused with 414 (detail tooLongToRead) rather than
// read at a cost a client chooses: at most about half a millisecond a
// request (three quarters behind forward auth). Browsers and CDNs keep URLs well under it; nginx refuses a
// request line over 8 KiB.
const maxReadPath = 4 << 10

// tooLongToRead is checkReadings' refusal of a path over maxReadPath.
const tooLongToRead = "the path is over 4 KiB and has other readings (a ;, \\, trailing dot, upper-case letter or trailing slash), which are not checked at that length"

// checkReadings returns why r (canonical, with its token's claims c,
// matched to p by set) is refused when a reading of its path selects
// another policy than p, or climbs above the root; "" when every reading agrees. sent is the escaped
// path as the upstream receives it; fold is false where paths are
// case-sensitive (server.case_sensitive_paths).
func checkReadings(r *http.Request, c policy.Claims, set *policy.Set, p *policy.Policy, sent string, fold, slashed bool) (detail string) {
	esc := escapedPath(r.URL)
	rs := rules(esc, sent, fold, set.CasedPaths())
	if slashed && !strings.HasSuffix(esc, "/") {
		// A policy names a path that ends in '/': Express and ASP.NET
		// Core serve this one there too.
		rs |= ruleAddSlash
	}
	if sent != esc {
		// What the canonical form resolved away (a segment in upper
		// case before a "..") is still in the target an upstream that
		// routes it as sent reads: its rules too.
		rs |= rules(sent, sent, fold, false)
	}
	if rs == 0 {
		return ""
	}
	if len(sent) > maxReadPath {
		return tooLongToRead
	}
	alt := *r
	u := *r.URL
	alt.URL = &u
	type reading struct {
		path string
		fold bool
	}
	seen := []reading{{r.URL.Path, false}}
	buf := make([]byte, 0, len(sent)+1)
	// Every combination of the rules that apply, the fullest first
	// (but for verbatim with WHATWG URL: two ways to read dot segments).
	for sub := rs; sub != 0; sub = (sub - 1) & rs {
		if sub&ruleVerbatim != 0 && sub&ruleURL != 0 {
			continue
		}
		b, ok := read(buf, sent, sub)
		path := string(b)
		if !ok {
			return "the path climbs above the root as some upstreams read it (" + describe(sub) + ")"
		}
		folded := sub&ruleFold != 0
		if sub&(ruleSlash|ruleAddSlash) == 0 {
			// A reading without a slash rule is settled by its path
			// (and case rule) alone.
			if slices.Contains(seen, reading{path, folded}) {
				continue
			}
			seen = append(seen, reading{path, folded})
		}
		alt.URL.Path, alt.URL.RawPath = path, ""
		var q *policy.Policy
		if folded {
			// An upstream that ignores case compares the policies'
			// paths in any case too.
			q, ok = set.MatchFoldClaims(&alt, c)
		} else {
			q, ok = set.MatchClaims(&alt, c)
		}
		if !ok && set.Unmatched != nil {
			// Matched by no policy, this reading is forwarded unlimited:
			// what an upstream so reading it serves, the configuration
			// limits nowhere, so counting the request under p (or as
			// unmatched, when p is) escapes no limit. (With unmatched =
			// "refuse" such a reading is refused: the upstream would
			// serve what the proxy answers 404.)
			continue
		}
		if ok && q == p {
			continue
		}
		if sub&(ruleSlash|ruleAddSlash) != 0 && (!ok || !(q.Match.HasPath && (q.Match.Path == path || folded && strings.EqualFold(q.Match.Path, path)) || q.Match.PathRegex != nil)) {
			// Without its trailing slash the path is another policy's
			// only where that policy names it exactly, or by a
			// path_regex (^/users/[0-9]+$ is the /users/:id an upstream
			// serves /users/1/ as): a prefix that ends in '/' keeps its
			// own root (/api/ under path_prefix = "/api/"); the readings
			// without this rule are checked on their own.
			continue
		}
		if p == set.Unmatched {
			return "the path is " + path + " as some upstreams read it (" + describe(sub) + "), which a policy matches; as sent it matches none"
		}
		if !ok {
			return "the path is " + path + " as some upstreams read it (" + describe(sub) + "), which no policy matches"
		}
		return "the path is " + path + " as some upstreams read it (" + describe(sub) + "), which another policy than this one's matches"
	}
	return ""
}

// escapedPath is u's path in the canonical escaped form canonicalize left
// it in: RawPath, else Path (canonicalize sets RawPath only where the two
// differ).
func escapedPath(u *url.URL) string {
	if u.RawPath != "" {
		return u.RawPath
	}
	return u.Path
}

// describe names the rules of rs.
func describe(rs rule) string {
	var parts []string
	for i := range ruleCount {
		if rs&(1<<i) != 0 {
			parts = append(parts, ruleNames[i])
		}
	}
	return strings.Join(parts, ", ")
}

// pathKey is the value of the path key part of a request whose canonical
// URL is u: its path as read by every rule that applies, so that
// spellings some upstream routes alike (/Login, /login;x=1, /login.,
// /login/) count as one key.
func pathKey(u *url.URL, s *config.Server) string {
	esc := escapedPath(u)
	rs := rules(esc, esc, !s.CaseSensitivePaths, false)
	if rs == 0 {
		return u.Path
	}
	if len(esc) > maxReadPath {
		return u.Path // refused by checkReadings
	}
	b, ok := read(nil, esc, rs)
	if !ok {
		return u.Path
	}
	if rs&ruleFold != 0 {
		return strings.ToLower(string(b))
	}
	return string(b)
}

// slashedPaths reports whether a policy of set names an exact path that
// ends in '/' (other than the root), or has a path_regex whose expression
// ends with "/$" or "/?$" (or the same before a ")"): only then may a
// path without a trailing slash be another policy's to an upstream that
// adds one.
func slashedPaths(set *policy.Set) bool {
	for _, p := range set.Policies {
		m := &p.Match
		if m.HasPath && len(m.Path) > 1 && strings.HasSuffix(m.Path, "/") {
			return true
		}
		if m.PathRegex != nil {
			re := strings.TrimSuffix(m.PathRegex.String(), ")$")
			re = strings.TrimSuffix(strings.TrimSuffix(re, "$"), "?")
			if strings.HasSuffix(re, "/") {
				return true
			}
		}
	}
	return false
}
