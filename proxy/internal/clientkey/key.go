package clientkey

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// groupIPv6 reduces an IPv6 address to its prefix of bits bits, so that a
// client cannot escape its limit by rotating through its /64.
func groupIPv6(a netip.Addr, bits int) netip.Addr {
	if !a.Is6() || a.Is4In6() || bits >= 128 {
		return a
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a
	}
	return p.Addr()
}

// Result says what the key parts of a request produced.
type Result uint8

// The results.
const (
	OK      Result = iota
	Skip           // on_missing = "skip": do not limit
	Reject         // on_missing = "reject": answer 400
	Invalid        // a keyed cookie or query parameter is repeated or malformed: answer 400
	// Unauthorized: on_missing = "unauthorized" and a jwt: part is
	// absent (the request has no valid token): answer 401.
	Unauthorized
)

// Request is what a client key is built from: the request as its policy
// matched it (canonical form), its Client, resolved once when it arrived,
// the server settings it is judged by, and the reader of its path key
// part. The data path builds one per request; it is read, never changed.
type Request struct {
	R      *http.Request
	Client *Client
	Server *config.Server
	// Path returns the path key part's value (the proxy's fullest reading
	// of the canonical path); required.
	Path PathReader
	// Identity gives the claims of the request's verified token, for
	// jwt:CLAIM parts; nil: no token is verified, every jwt: part is
	// absent.
	Identity ClaimReader
}

// PathReader gives the path key part's value.
type PathReader interface{ PathKey() string }

// ClaimReader gives a claim of a request's token, verified once when the
// request arrived: false when the request has no valid token (missing or
// invalid alike) or its token has no single value at path. An invalid
// token never gives a value, so that it is never counted as another
// client.
type ClaimReader interface {
	Claim(path string) (string, bool)
}

// Policy builds the key of q for policy p: its key parts, each
// length-prefixed ("13:203.0.113.7" …) so that no value can be crafted
// to collide with another combination; an absent part is written "-",
// which no length prefix produces. With on_missing = "ip" a request
// missing a part is keyed by its address alone, under a distinct prefix.
func Policy(q *Request, p *policy.Policy) (key string, res Result) {
	return Of(q, p.Key, p.OnMissing)
}

// Limits builds, for a policy whose limits have keys of their own
// (OwnKeys), the key each limit counts q under into keys (len(p.Limits)):
// limiter.SkipKey for a limit whose key q lacks with on_missing "skip".
// res is Invalid if a limit's key part is ambiguous, Reject if any
// limit's on_missing rejects q, Skip if every limit skips it. Each
// distinct key is built once.
func Limits(q *Request, p *policy.Policy, keys []string) Result {
	skipped := 0
	for i, lk := range p.LimitKeys {
		j := 0
		for j < i && !p.LimitKeys[j].Equal(lk) {
			j++
		}
		if j < i {
			keys[i] = keys[j]
		} else {
			k, res := Of(q, lk.Parts, lk.OnMissing)
			switch res {
			case Reject, Invalid, Unauthorized:
				return res
			case Skip:
				k = limiter.SkipKey
			}
			keys[i] = k
		}
		if keys[i] == limiter.SkipKey {
			skipped++
		}
	}
	if skipped == len(keys) {
		return Skip
	}
	return OK
}

// Of builds the key of q from parts, with onMissing for an absent part;
// Invalid, whatever onMissing says, for a keyed cookie or query parameter
// that q holds ambiguously (Keyed).
func Of(q *Request, parts []config.KeyPart, onMissing config.OnMissing) (key string, res Result) {
	s := q.Server
	var stack [128]byte
	b := stack[:0]
	missing, stopped, noToken := false, false, false
	for _, part := range parts {
		if stopped {
			if onMissing == config.MissingUnauthorized && part.Kind == config.KeyJWT && !noToken {
				// Which answer (401 or 400) depends on every part.
				var st State
				_, st = appendPart(b, q, part)
				noToken = st != Present
			}
			// The key is settled by on_missing, but a keyed cookie or
			// query parameter sent ambiguously is still refused, as
			// whatever the key, the upstream may read another value.
			if keyed(part.Kind) && s.AmbiguousKeyParts != config.AmbiguousRewrite {
				if _, st := Keyed(q.R, part, s.AmbiguousKeyParts); st == Ambiguous {
					return "", Invalid
				}
			}
			continue
		}
		var st State
		if b, st = appendPart(b, q, part); st == Present {
			continue
		}
		if st == Ambiguous {
			return "", Invalid
		}
		missing = true
		noToken = noToken || part.Kind == config.KeyJWT
		if onMissing != config.MissingShared {
			stopped = true
			continue
		}
		b = append(b, "-;"...)
	}
	if !missing {
		return string(b), OK
	}
	switch onMissing {
	case config.MissingShared:
		return string(b), OK
	case config.MissingSkip:
		return "", Skip
	case config.MissingReject:
		return "", Reject
	case config.MissingUnauthorized:
		if noToken {
			return "", Unauthorized
		}
		return "", Reject
	}
	ip := ""
	if q.Client.OK {
		ip = groupIPv6(q.Client.Addr, s.IPv6Prefix).String()
	}
	return "ip=" + ip, OK
}

// For builds the client key of policy p from raw values of its key
// parts, in order, the way the data path builds it from a request: an ip
// part is parsed and grouped by ipv6_prefix, the others are taken as they
// are. The admin API uses it to find one client's state.
func For(p *policy.Policy, s *config.Server, values []string) (string, error) {
	if len(values) != len(p.Key) {
		return "", fmt.Errorf("policy %q has %d key parts (%s); got %d values", p.Name, len(p.Key), Names(p), len(values))
	}
	var b []byte
	for i, part := range p.Key {
		v := values[i]
		if part.Kind == config.KeyIP {
			a, err := netip.ParseAddr(v)
			if err != nil {
				return "", fmt.Errorf("key part %d (ip): %q is not an address", i, v)
			}
			v = groupIPv6(a.Unmap(), s.IPv6Prefix).String()
		}
		b = AppendPart(b, []byte(v))
	}
	return string(b), nil
}

// Parts splits a key that For or a request built into its parts'
// values; false if key is not one (a key a limit of its own builds with
// on_missing markers decodes as far as it can).
func Parts(key string) ([]string, bool) {
	var parts []string
	for key != "" {
		n, rest, ok := strings.Cut(key, ":")
		l, err := strconv.Atoi(n)
		if !ok || err != nil || l < 0 || l >= len(rest) || rest[l] != ';' {
			return append(parts, key), false
		}
		parts = append(parts, rest[:l])
		key = rest[l+1:]
	}
	return parts, true
}

// AppendPart appends one present key part, length-prefixed: "13:203.0.113.7;".
func AppendPart(b, v []byte) []byte {
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, ':')
	b = append(b, v...)
	return append(b, ';')
}

// Key parts read one value, the one an upstream most likely reads, so that
// a client cannot add values to make itself a fresh key while the upstream
// still sees the first one (X-API-Key: realkey, then X-API-Key: junkN).
// An empty value counts as absent (on_missing applies). A header is read
// by its first value, and the upstream receives only that one
// (pinKeyHeaders); a cookie or query parameter must appear once,
// well-formed (keyed.go).

// firstHeaderValue returns the first value of the header name (canonical):
// its first field line, up to the first comma outside double quotes (in
// HTTP several lines of a field are one comma-separated list), with
// surrounding white space trimmed. This is what Go's Header.Get and nginx's
// $http_ variables give an upstream for a repeated header, and for a list
// on one line the first element, so that appending ", junk" makes no new
// key. A value with a comma of its own (a User-Agent) is cut there: keys
// can only become coarser, never finer, than what the client sent.
func firstHeaderValue(h http.Header, name string) (string, bool) {
	vs := h[name]
	if len(vs) == 0 {
		return "", false
	}
	v := vs[0]
	quoted := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			v = v[:i]
		}
	}
	v = strings.TrimSpace(v)
	return v, v != ""
}

// Pin leaves each header that is a part of p's key with the one
// value the key was built from (or removes it when that value is empty),
// so that the upstream reads the identity that was limited, whichever of
// several values it would have read.
func Pin(r *http.Request, p *policy.Policy) {
	pinHeaders(r, p.Key)
	if p.OwnKeys {
		for _, lk := range p.LimitKeys {
			pinHeaders(r, lk.Parts)
		}
	}
}

func pinHeaders(r *http.Request, parts []config.KeyPart) {
	for _, part := range parts {
		if part.Kind != config.KeyHeader {
			continue
		}
		vs := r.Header[part.Name]
		if len(vs) == 0 {
			continue
		}
		if v, ok := firstHeaderValue(r.Header, part.Name); ok {
			if len(vs) != 1 || vs[0] != v {
				r.Header[part.Name] = []string{v}
			}
		} else {
			delete(r.Header, part.Name)
		}
	}
}

// Names returns p's key parts as its key list writes them, comma-separated.
func Names(p *policy.Policy) string {
	names := make([]string, len(p.Key))
	for i, k := range p.Key {
		names[i] = k.String()
	}
	return strings.Join(names, ", ")
}
