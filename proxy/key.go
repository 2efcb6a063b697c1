package proxy

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

// keyResult says what the key parts of a request produced.
type keyResult uint8

const (
	keyOK      keyResult = iota
	keySkip              // on_missing = "skip": do not limit
	keyReject            // on_missing = "reject": answer 400
	keyMissing           // (internal) a part was absent
	keyInvalid           // a keyed cookie or query parameter is repeated or malformed: answer 400
)

// clientKey builds the key of r for policy p: its key parts, each
// length-prefixed ("13:203.0.113.7" …) so that no value can be crafted to
// collide with another combination; an absent part is written "-", which
// no length prefix produces. With on_missing = "ip" a request missing a part
// is keyed by its address alone, under a distinct prefix.
func clientKey(r *http.Request, p *policy.Policy, s *config.Server) (key string, res keyResult) {
	return keyOf(r, p.Key, p.OnMissing, s)
}

// limitKeys builds, for a policy whose limits have keys of their own
// (OwnKeys), the key each limit counts r under into keys (len(p.Limits)):
// limiter.SkipKey for a limit whose key r lacks with on_missing "skip".
// res is keyInvalid if a limit's key part is ambiguous, keyReject if any
// limit's on_missing rejects r, keySkip if every limit skips it. Each
// distinct key is built once.
func limitKeys(r *http.Request, p *policy.Policy, s *config.Server, keys []string) keyResult {
	skipped := 0
	for i, lk := range p.LimitKeys {
		j := 0
		for j < i && !p.LimitKeys[j].Equal(lk) {
			j++
		}
		if j < i {
			keys[i] = keys[j]
		} else {
			k, res := keyOf(r, lk.Parts, lk.OnMissing, s)
			switch res {
			case keyReject, keyInvalid:
				return res
			case keySkip:
				k = limiter.SkipKey
			}
			keys[i] = k
		}
		if keys[i] == limiter.SkipKey {
			skipped++
		}
	}
	if skipped == len(keys) {
		return keySkip
	}
	return keyOK
}

// keyOf builds the key of r from parts, with onMissing for an absent
// part; keyInvalid, whatever onMissing says, for a keyed cookie or query
// parameter that r holds ambiguously (keyedPart).
func keyOf(r *http.Request, parts []config.KeyPart, onMissing config.OnMissing, s *config.Server) (key string, res keyResult) {
	var stack [128]byte
	b := stack[:0]
	missing, stopped := false, false
	for _, part := range parts {
		if stopped {
			// The key is settled by on_missing, but a keyed cookie or
			// query parameter sent ambiguously is still refused, as
			// whatever the key, the upstream may read another value.
			if (part.Kind == config.KeyCookie || part.Kind == config.KeyQuery) && s.AmbiguousKeyParts != config.AmbiguousRewrite {
				if _, st := keyedPart(r, part, s.AmbiguousKeyParts); st == partAmbiguous {
					return "", keyInvalid
				}
			}
			continue
		}
		if part.Kind == config.KeyIP {
			// The common case, without an intermediate string.
			if a, ok := clientIP(r, s); ok {
				var ipb [64]byte
				b = appendPart(b, groupIPv6(a, s.IPv6Prefix).AppendTo(ipb[:0]))
				continue
			}
		} else if part.Kind == config.KeyCookie || part.Kind == config.KeyQuery {
			v, st := keyedPart(r, part, s.AmbiguousKeyParts)
			switch st {
			case partPresent:
				b = appendPart(b, []byte(v))
				continue
			case partAmbiguous:
				return "", keyInvalid
			}
		} else if v, ok := keyPart(r, part, s); ok {
			b = appendPart(b, []byte(v))
			continue
		}
		missing = true
		if onMissing != config.MissingShared {
			stopped = true
			continue
		}
		b = append(b, "-;"...)
	}
	if !missing {
		return string(b), keyOK
	}
	switch onMissing {
	case config.MissingShared:
		return string(b), keyOK
	case config.MissingSkip:
		return "", keySkip
	case config.MissingReject:
		return "", keyReject
	}
	ip, _ := keyPart(r, config.KeyPart{Kind: config.KeyIP}, s)
	return "ip=" + ip, keyOK
}

// KeyFor builds the client key of policy p from raw values of its key
// parts, in order, the way the data path builds it from a request: an ip
// part is parsed and grouped by ipv6_prefix, the others are taken as they
// are. The admin API uses it to find one client's state.
func KeyFor(p *policy.Policy, s *config.Server, values []string) (string, error) {
	if len(values) != len(p.Key) {
		return "", fmt.Errorf("policy %q has %d key parts (%s); got %d values", p.Name, len(p.Key), keyNames(p), len(values))
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
		b = appendPart(b, []byte(v))
	}
	return string(b), nil
}

// KeyParts splits a key that KeyFor or a request built into its parts'
// values; false if key is not one (a key a limit of its own builds with
// on_missing markers decodes as far as it can).
func KeyParts(key string) ([]string, bool) {
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

// appendPart appends one present key part, length-prefixed: "13:203.0.113.7;".
func appendPart(b, v []byte) []byte {
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, ':')
	b = append(b, v...)
	return append(b, ';')
}

func keyPart(r *http.Request, part config.KeyPart, s *config.Server) (string, bool) {
	switch part.Kind {
	case config.KeyIP:
		a, ok := clientIP(r, s)
		if !ok {
			return "", false
		}
		return groupIPv6(a, s.IPv6Prefix).String(), true
	case config.KeyHeader:
		return firstHeaderValue(r.Header, part.Name)
	case config.KeyQuery, config.KeyCookie:
		v, st := keyedPart(r, part, s.AmbiguousKeyParts)
		return v, st == partPresent
	case config.KeyHost:
		return strings.ToLower(config.HostName(r.Host)), true
	case config.KeyMethod:
		return r.Method, true
	case config.KeyPath:
		return pathKey(r.URL, s), true
	}
	return "", false
}

// Key parts read one value, the one an upstream most likely reads, so that
// a client cannot add values to make itself a fresh key while the upstream
// still sees the first one (X-API-Key: realkey, then X-API-Key: junkN).
// An empty value counts as absent (on_missing applies). A header is read
// by its first value, and the upstream receives only that one
// (pinKeyHeaders); a cookie or query parameter must appear once,
// well-formed (keyparts.go).

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

// pinKeyHeaders leaves each header that is a part of p's key with the one
// value the key was built from (or removes it when that value is empty),
// so that the upstream reads the identity that was limited, whichever of
// several values it would have read.
func pinKeyHeaders(r *http.Request, p *policy.Policy) {
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
