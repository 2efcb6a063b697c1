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

// captureReplay returns r's replay fields, arrived at start.
func captureReplay(r *http.Request, names, claimPaths []string, claims identity.Claims, start time.Time) *replayFields {
	f := &replayFields{received: start, target: escapeReplay(r.RequestURI)}
	for _, n := range names {
		if vs := r.Header[n]; len(vs) > 0 {
			f.headers = append(f.headers, zap.String("h:"+n, escapeReplay(strings.Join(vs, "\n"))))
		}
	}
	for _, path := range claimPaths {
		if v, ok := claims.JSON(path); ok {
			f.headers = append(f.headers, zap.String("c:"+path, escapeReplay(v)))
		}
	}
	return f
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
