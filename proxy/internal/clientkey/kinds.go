package clientkey

import (
	"strings"

	"github.com/limitproxy/limitproxy/policy/config"
)

// The kinds of key parts are named and parsed by policy/config's
// keyKinds; how each is read from a request is here, in appendPart, the
// one switch over config.KeyKind on the data path. A new kind of key part
// is its config entry and its case here (and, if it reads a header, its
// case in Header, so that [log] access_replay logs that header).

// appendPart appends q's value of part to b, length-prefixed (AppendPart),
// when q holds it (Present); b is returned unchanged otherwise.
func appendPart(b []byte, q *Request, part config.KeyPart) ([]byte, State) {
	s := q.Server
	switch part.Kind {
	case config.KeyIP:
		if !q.Client.OK {
			return b, Absent
		}
		// Without an intermediate string.
		var ipb [64]byte
		return AppendPart(b, groupIPv6(q.Client.Addr, s.IPv6Prefix).AppendTo(ipb[:0])), Present
	case config.KeyHeader:
		v, ok := firstHeaderValue(q.R.Header, part.Name)
		return appendString(v, ok, b)
	case config.KeyQuery, config.KeyCookie:
		v, st := Keyed(q.R, part, s.AmbiguousKeyParts)
		if st != Present {
			return b, st
		}
		return AppendPart(b, []byte(v)), Present
	case config.KeyJWT:
		if q.Identity == nil {
			return b, Absent
		}
		v, ok := q.Identity.Claim(part.Name)
		return appendString(v, ok, b)
	case config.KeyHost:
		return appendString(strings.ToLower(config.HostName(q.R.Host)), true, b)
	case config.KeyMethod:
		return appendString(q.R.Method, true, b)
	case config.KeyPath:
		return appendString(q.Path.PathKey(), true, b)
	}
	return b, Absent
}

// appendString is appendPart's ending for a value read as a string.
func appendString(v string, ok bool, b []byte) ([]byte, State) {
	if !ok {
		return b, Absent
	}
	return AppendPart(b, []byte(v)), Present
}

// keyed reports whether parts of kind k are keyed cookies or query
// parameters (keyed.go), which a request may hold ambiguously.
func keyed(k config.KeyKind) bool { return k == config.KeyCookie || k == config.KeyQuery }

// Header returns the request header a part of kind k reads, if any: the
// header of a header part, Cookie of a cookie part.
func Header(part config.KeyPart) (string, bool) {
	switch part.Kind {
	case config.KeyHeader:
		return part.Name, true
	case config.KeyCookie:
		return "Cookie", true
	}
	return "", false
}
