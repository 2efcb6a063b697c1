package proxy

import (
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
	"github.com/limitproxy/limitproxy/proxy/internal/identity"
)

// With [log] access_replay, each access-log line carries what `limitproxy
// replay` needs to decide its request again exactly (docs/replay.md):
// received, the instant its limits decided at; client, its client
// address; target, its request-target as received; and h:NAME for each
// request header the policies match or key on (their field lines joined
// by "\n", which no field value holds); and, with an [identity], c:PATH
// for each claim the policies key or match on, as JSON text, when the
// request's token was valid (never the token). Target and header values are
// escaped reversibly (escapeReplay): the log is UTF-8, and a client's
// bytes that are not would otherwise be replaced, merging keys a replay
// must keep apart.
//
// With access_replay = "hashed", what the policies only key on is logged
// as keyed hashes (KeyHasher.Value): a key needs its values equal, never
// as they are, so a replay that keys by the hashes decides every request
// as the proxy did. A header only keyed (or matched by presence) is
// h#:NAME, the hash of the value its key part reads; the Cookie header,
// when cookies are keyed, h#:Cookie, only the pairs that name a keyed
// cookie, values hashed (clientkey.HashedCookies); the target's query
// only the pairs that name a keyed parameter, values hashed
// (clientkey.HashedQuery); a claim only keyed, c#:PATH, the hash of its
// value. What a policy matches on by value (a header's, a claim's) or
// takes an estimate from is needed as it is: h:NAME, c:PATH.

// replayPlan is what [log] access_replay logs of each request under one
// policy set: built once, by newReplayPlan, when the set is swapped in.
type replayPlan struct {
	hashed bool
	// headers are logged as they are (h:NAME), claims as JSON (c:PATH).
	headers, claims []string
	// With hashed: keyed are the headers logged as the hash of the value
	// their key part reads (h#:NAME); cookies the keyed cookies (h#:Cookie
	// names those, when cookie is set); queries the keyed query
	// parameters the target keeps; keyedClaims the claims logged as the
	// hash of their value (c#:PATH).
	keyed, cookies, queries, keyedClaims []string
	cookie                               bool
}

// newReplayPlan returns what mode logs under set; nil for ReplayOff.
func newReplayPlan(set *policy.Set, mode config.AccessReplay) *replayPlan {
	switch mode {
	case config.ReplayOff:
		return nil
	case config.ReplayWhole:
		return &replayPlan{headers: replayHeaders(set), claims: replayClaims(set)}
	}
	var value, keyed, cookies, queries, claims, keyedClaims []string
	add := func(list *[]string, s string) {
		if !slices.Contains(*list, s) {
			*list = append(*list, s)
		}
	}
	parts := func(ps []config.KeyPart) {
		for _, kp := range ps {
			switch kp.Kind {
			case config.KeyHeader:
				add(&keyed, http.CanonicalHeaderKey(kp.Name))
			case config.KeyCookie:
				add(&cookies, kp.Name)
			case config.KeyQuery:
				add(&queries, kp.Name)
			case config.KeyJWT:
				add(&keyedClaims, kp.Name)
			}
		}
	}
	for _, p := range set.Policies {
		for _, h := range p.Match.Headers {
			if h.Any {
				add(&keyed, http.CanonicalHeaderKey(h.Name)) // its presence
			} else {
				add(&value, http.CanonicalHeaderKey(h.Name))
			}
		}
		for _, c := range p.Match.Claims {
			add(&claims, c.Path)
		}
		parts(p.Key)
		for _, lk := range p.LimitKeys {
			parts(lk.Parts)
		}
		for _, ch := range p.Charges {
			if ch.EstimateHeader != "" {
				add(&value, http.CanonicalHeaderKey(ch.EstimateHeader))
			}
		}
	}
	pl := &replayPlan{hashed: true, queries: queries}
	const cookie = "Cookie"
	if slices.Contains(keyed, cookie) {
		// Keyed as a header (header:Cookie): as it is, as if matched.
		add(&value, cookie)
	}
	if !slices.Contains(value, cookie) {
		pl.cookie = len(cookies) > 0 || slices.Contains(keyed, cookie)
		pl.cookies = cookies
	}
	for _, n := range keyed {
		if n != cookie && !slices.Contains(value, n) {
			pl.keyed = append(pl.keyed, n)
		}
	}
	for _, c := range keyedClaims {
		if !slices.Contains(claims, c) {
			pl.keyedClaims = append(pl.keyedClaims, c)
		}
	}
	pl.headers, pl.claims = value, claims
	for _, l := range [][]string{pl.headers, pl.claims, pl.keyed, pl.keyedClaims} {
		slices.Sort(l)
	}
	return pl
}

// replayFields are one request's, captured as it arrives (before the key
// headers are pinned to one value).
type replayFields struct {
	received time.Time
	target   string
	headers  []zap.Field // h:NAME, then c:PATH
}

// replayClaims returns the claim paths set's policies read (jwt: key
// parts, match claims), sorted: those [log] access_replay logs.
func replayClaims(set *policy.Set) []string {
	var paths []string
	add := func(ps []config.KeyPart) {
		for _, kp := range ps {
			if kp.Kind == config.KeyJWT && !slices.Contains(paths, kp.Name) {
				paths = append(paths, kp.Name)
			}
		}
	}
	for _, p := range set.Policies {
		for _, c := range p.Match.Claims {
			if !slices.Contains(paths, c.Path) {
				paths = append(paths, c.Path)
			}
		}
		add(p.Key)
		for _, lk := range p.LimitKeys {
			add(lk.Parts)
		}
	}
	slices.Sort(paths)
	return paths
}

// ReplayHeaders returns the request headers set's policies read (match
// headers, key parts, Cookie for cookie parts, estimate headers) in
// canonical form, sorted: those [log] access_replay logs, and those a
// replay of a log written without it cannot know.
func ReplayHeaders(set *policy.Set) []string { return replayHeaders(set) }

// replayHeaders is ReplayHeaders.
func replayHeaders(set *policy.Set) []string {
	var names []string
	add := func(n string) {
		if n = http.CanonicalHeaderKey(n); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	parts := func(ps []config.KeyPart) {
		for _, kp := range ps {
			if name, ok := clientkey.Header(kp); ok {
				add(name)
			}
		}
	}
	for _, p := range set.Policies {
		for _, h := range p.Match.Headers {
			add(h.Name)
		}
		parts(p.Key)
		for _, lk := range p.LimitKeys {
			parts(lk.Parts)
		}
		for _, ch := range p.Charges {
			if ch.EstimateHeader != "" {
				add(ch.EstimateHeader)
			}
		}
	}
	slices.Sort(names)
	return names
}

// captureReplay returns r's replay fields under pl, arrived at start;
// hash hashes a value (KeyHasher.Value), with pl.hashed.
func captureReplay(r *http.Request, pl *replayPlan, claims identity.Claims, start time.Time, hash func(string) string) *replayFields {
	target := r.RequestURI
	if pl.hashed {
		target = hashedTarget(target, pl.queries, hash)
	}
	f := &replayFields{received: start, target: escapeReplay(target)}
	for _, n := range pl.headers {
		if vs := r.Header[n]; len(vs) > 0 {
			f.headers = append(f.headers, zap.String("h:"+n, escapeReplay(strings.Join(vs, "\n"))))
		}
	}
	for _, n := range pl.keyed {
		if _, ok := r.Header[n]; ok {
			// Present, and the hash of what a key reads ("" for nothing).
			v, _ := clientkey.HeaderValue(r.Header, n)
			f.headers = append(f.headers, zap.String("h#:"+n, hash(v)))
		}
	}
	if vs, ok := r.Header["Cookie"]; ok && pl.cookie {
		f.headers = append(f.headers, zap.String("h#:Cookie", escapeReplay(clientkey.HashedCookies(vs, pl.cookies, hash))))
	}
	for _, path := range pl.claims {
		if v, ok := claims.JSON(path); ok {
			f.headers = append(f.headers, zap.String("c:"+path, escapeReplay(v)))
		}
	}
	for _, path := range pl.keyedClaims {
		if v, ok := claims.Get(path); ok {
			f.headers = append(f.headers, zap.String("c#:"+path, hash(v)))
		}
	}
	return f
}

// hashedTarget is the request-target target with its query cut to the
// pairs that name one of the keyed parameters names, their values hashed
// (clientkey.HashedQuery). A '#' in the query (which refuses the request
// before any key is read) is kept as the query.
func hashedTarget(target string, names []string, hash func(string) string) string {
	path, query, ok := strings.Cut(target, "?")
	switch {
	case !ok:
		return target
	case strings.IndexByte(query, '#') >= 0:
		return path + "?#"
	}
	if query = clientkey.HashedQuery(query, names, hash); query == "" {
		return path
	}
	return path + "?" + query
}

// fields appends f's access-log fields to fs. (The client address is on
// every line: see logAccess.)
func (f *replayFields) fields(fs []zap.Field) []zap.Field {
	fs = append(fs, zap.String("received", f.received.UTC().Format(time.RFC3339Nano)), zap.String("target", f.target))
	return append(fs, f.headers...)
}

// escapeReplay writes s so that UTF-8 holds it and it can be read back
// byte for byte: each '%' as %25, each byte of an invalid UTF-8 sequence
// as %XX; the rest as it is. (The common case, valid and without '%',
// costs nothing.)
func escapeReplay(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "%") {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case s[i] == '%' || r == utf8.RuneError && n == 1:
			b = append(b, '%', hex[s[i]>>4], hex[s[i]&15])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}
