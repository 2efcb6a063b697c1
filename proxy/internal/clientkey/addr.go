package clientkey

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"

	"github.com/limitproxy/limitproxy/policy/config"
)

// The client address (docs/security-model.md) has one source: the peer,
// and, only when the peer is a trusted proxy, the one header [server]
// client_ip_header names. Resolve is the only place it is worked out, once
// a request, as it arrives; the key builder, the access log, the replay
// fields, the fair share of an upstream's concurrency limit and the
// headers the upstream is sent (SetForwarded) all read that one Client,
// so that none of them can name another client than the one that was
// limited.

// Client is a request's addresses, as Resolve works them out. The zero
// Client has no address (OK false): a request whose RemoteAddr is not
// one, which no part of the key or the log can name.
type Client struct {
	// Addr is the client address: the peer, or behind a trusted peer the
	// one client_ip_header names. IPv4-mapped addresses are unmapped and
	// IPv6 zones dropped.
	Addr netip.Addr
	// Peer is the connection's peer address.
	Peer netip.Addr
	// Hops are the trusted proxies' addresses between Addr and Peer,
	// left to right (SetForwarded writes them); nil for none.
	Hops []netip.Addr
	// OK is false when RemoteAddr could not be parsed (never the case for
	// requests from net/http's server or limitproxy's front).
	OK bool
	// Trusted reports that Peer is a trusted proxy whose headers are
	// believed: inside trusted_proxies, on a connection not marked
	// peer-only (WithPeerOnly).
	Trusted bool
}

// Resolve returns r's Client under s. The client is the peer, unless the
// peer is inside s.TrustedProxies and its connection is not marked
// peer-only (WithPeerOnly): then s.ClientIPHeader, read as a list (every
// field line, comma-separated elements; for Forwarded, each element's
// for= value; empty elements ignored), is walked from the right (the
// element nearest to us):
//
//   - TrustedHops = 0: past every element inside TrustedProxies to the
//     first that is not one (nginx's real_ip_recursive). An element that
//     is not an address (unknown, _hidden, garbage) stops the walk at the
//     trusted hop that wrote it, or the peer. If every element is trusted,
//     the leftmost is the client.
//   - TrustedHops = N > 0: the N-th element from the right, whatever its
//     address (Envoy's xff_num_trusted_hops); with fewer elements, or if
//     that one is not an address, the peer.
//
// Hops take an allocation of their own only when there are some.
func Resolve(r *http.Request, s *config.Server) Client {
	peer, ok := ParsePeer(r.RemoteAddr)
	if !ok {
		return Client{}
	}
	c := Client{Addr: peer, Peer: peer, OK: true}
	if !Trusted(peer, s.TrustedProxies) || peerOnly(r.Context()) {
		return c
	}
	c.Trusted = true
	name := headerName(s)
	c.Addr, c.Hops = walkHeader(peer, r.Header[name], name == "Forwarded", s.TrustedProxies, s.TrustedHops, true)
	return c
}

// FromHeader is proxy.ClientFromHeader: the client a trusted peer's
// client-address header names, read as Resolve reads it.
func FromHeader(peer netip.Addr, lines []string, header string, trusted []netip.Prefix, hops int) netip.Addr {
	client, _ := walkHeader(peer, lines, http.CanonicalHeaderKey(header) == "Forwarded", trusted, hops, false)
	return client
}

// walkHeader is Resolve's reading of the client-address header
// lines vs behind the trusted peer; see there. With collect, the
// trusted hops found are returned as chain, left to right.
func walkHeader(peer netip.Addr, vs []string, forwarded bool, trusted []netip.Prefix, trustedHops int, collect bool) (client netip.Addr, chain []netip.Addr) {
	client = peer
	if len(vs) == 0 {
		return client, chain
	}
	it := elements{lines: vs, forwarded: forwarded}
	if trustedHops > 0 {
		for n := 1; ; n++ {
			v, more := it.next()
			if !more {
				client = peer // fewer elements than hops
				break
			}
			a, err := parseHop(v)
			if n == trustedHops {
				if err == nil {
					client = a
				}
				break
			}
			if err == nil && collect {
				chain = append(chain, a)
			}
		}
		if client == peer {
			chain = nil
		}
	} else {
		walked := false
		for {
			v, more := it.next()
			if !more {
				break
			}
			a, err := parseHop(v)
			if err != nil {
				// An unknown or obfuscated hop: the trusted proxy that
				// reported it is the best we know.
				break
			}
			if walked && collect {
				chain = append(chain, client)
			}
			client, walked = a, true
			if !Trusted(a, trusted) {
				break
			}
		}
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return client, chain
}

// headerName returns s's client-address header: ClientIPHeader, or
// X-Forwarded-For if that is "" (a Server not from config.Parse).
func headerName(s *config.Server) string {
	if s.ClientIPHeader == "" {
		return config.DefaultClientIPHeader
	}
	return s.ClientIPHeader
}

// ParsePeer parses a RemoteAddr, "ip:port" or a bare address, as the
// peer's address: IPv4-mapped addresses unmapped, any IPv6 zone dropped.
func ParsePeer(remote string) (netip.Addr, bool) {
	if a, ok := parseIPv4Port(remote); ok {
		return a, true
	}
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		a, err := netip.ParseAddr(remote)
		if err != nil {
			return netip.Addr{}, false
		}
		return a.Unmap().WithZone(""), true
	}
	return ap.Addr().Unmap().WithZone(""), true
}

// parseIPv4Port is ParsePeer's way for the RemoteAddr of nearly every
// request, "a.b.c.d:port", in half of netip.ParseAddrPort's time: it
// reports ok only for what netip.ParseAddrPort reads as an IPv4 address
// and a port (four decimal octets of 0 to 255 without leading zeros, a
// colon, and a port of 1 to 5 digits, at most 65535), and then the same
// address; for anything else, ParsePeer asks netip.
func parseIPv4Port(s string) (netip.Addr, bool) {
	var ip [4]byte
	i := 0
	for f := range 4 {
		if f > 0 {
			if i >= len(s) || s[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
		start, v := i, 0
		for i < len(s) && i-start < 3 && '0' <= s[i] && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if i == start || v > 255 || s[start] == '0' && i-start > 1 {
			return netip.Addr{}, false
		}
		ip[f] = byte(v)
	}
	if i >= len(s) || s[i] != ':' {
		return netip.Addr{}, false
	}
	port := s[i+1:]
	if len(port) == 0 || len(port) > 5 {
		return netip.Addr{}, false
	}
	v := 0
	for j := 0; j < len(port); j++ {
		if port[j] < '0' || port[j] > '9' {
			return netip.Addr{}, false
		}
		v = v*10 + int(port[j]-'0')
	}
	if v > 65535 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(ip), true
}

// Trusted reports whether a is inside one of trusted.
func Trusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// elements yields the elements of a client-address header from the right:
// its field lines' comma-separated elements, white space trimmed, empty
// ones skipped; of a Forwarded header, each element's for= value ("" if
// it has none, which is not an address). It reads each byte once, so a
// header of many elements costs time in proportion to its length.
type elements struct {
	lines     []string // field lines not yet begun
	cur       string   // what is left of the line being read
	forwarded bool
	elems     []string // Forwarded: the elements of the line being read
}

func (h *elements) next() (string, bool) {
	for {
		if h.forwarded && len(h.elems) > 0 {
			el := strings.TrimSpace(h.elems[len(h.elems)-1])
			h.elems = h.elems[:len(h.elems)-1]
			if el == "" {
				continue
			}
			return forwardedFor(el), true
		}
		if h.cur == "" {
			if len(h.lines) == 0 {
				return "", false
			}
			h.cur, h.lines = h.lines[len(h.lines)-1], h.lines[:len(h.lines)-1]
			if h.forwarded {
				h.elems, h.cur = splitQuoted(h.cur, ','), ""
			}
			continue
		}
		var el string
		if i := strings.LastIndexByte(h.cur, ','); i >= 0 {
			el, h.cur = h.cur[i+1:], h.cur[:i]
		} else {
			el, h.cur = h.cur, ""
		}
		if el = strings.TrimSpace(el); el != "" {
			return el, true
		}
	}
}

// forwardedFor returns the for= value of one RFC 7239 Forwarded element
// (pairs separated by semicolons), "" if it has none.
func forwardedFor(el string) string {
	for _, pair := range splitQuoted(el, ';') {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
			return v
		}
	}
	return ""
}

// parseHop parses one hop of a client-address header or a Forwarded for=
// value: an address, optionally with a port, IPv6 optionally in brackets,
// optionally in double quotes. IPv4-mapped addresses are unmapped and an
// IPv6 zone is dropped, so that no spelling of one address makes another
// key.
func parseHop(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), nil
	}
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap().WithZone(""), err
}

// splitQuoted splits s at sep outside double quotes.
func splitQuoted(s string, sep byte) []string {
	var parts []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// peerOnlyKey is the context key of WithPeerOnly.
type peerOnlyKey struct{}

// WithPeerOnly is proxy.WithPeerOnly: under the context it returns, a
// request is keyed by its peer whenever peerOnly returns true.
func WithPeerOnly(ctx context.Context, peerOnly func() bool) context.Context {
	return context.WithValue(ctx, peerOnlyKey{}, peerOnly)
}

func peerOnly(ctx context.Context) bool {
	f, _ := ctx.Value(peerOnlyKey{}).(func() bool)
	return f != nil && f()
}

// SetForwarded writes the forwarding headers of pr.Out so that each names
// c, the client pr.In was keyed by (Resolve over s, with its hops),
// whichever an upstream reads:
//
//   - X-Forwarded-For: the client, the trusted hops between it and the
//     peer, the peer; the part of the chain the client wrote itself is
//     dropped. From a peer that is not trusted: the peer alone.
//   - Forwarded, when pr.In carried one or it is the configured header:
//     the same addresses as for= elements (no other parameter is kept).
//   - the configured header, if another: the client and the trusted hops,
//     as X-Forwarded-For but without the peer.
//   - each of config.ClientAddressHeaders pr.In carries: the client.
//   - X-Forwarded-Host and X-Forwarded-Proto as httputil's SetXForwarded
//     sets them.
//
// httputil.ReverseProxy has removed X-Forwarded-For, Forwarded and the
// other two from pr.Out before Rewrite; the rest are pr.In's, copied.
func SetForwarded(pr *httputil.ProxyRequest, s *config.Server, c *Client) {
	in, h := pr.In, pr.Out.Header
	// One backing array for the three values always set (one allocation
	// where SetXForwarded makes three).
	vals := make([]string, 3)
	vals[1] = in.Host
	h["X-Forwarded-Host"] = vals[1:2:2]
	vals[2] = "http"
	if in.TLS != nil {
		vals[2] = "https"
	}
	h["X-Forwarded-Proto"] = vals[2:3:3]
	client, peer, chain := c.Addr, c.Peer, c.Hops
	name := headerName(s)
	if !c.OK {
		// No peer address (never from net/http's server): nothing can be
		// vouched for.
		delete(h, "X-Forwarded-For")
		delete(h, "Forwarded")
		delete(h, name)
		for _, n := range config.ClientAddressHeaders {
			delete(h, n)
		}
		return
	}
	alone := client == peer && len(chain) == 0
	var ab [64]byte
	if host, _, err := net.SplitHostPort(in.RemoteAddr); alone && err == nil && host == string(peer.AppendTo(ab[:0])) {
		// The common case (an untrusted peer, or no header): the peer's
		// own text, without a new string.
		vals[0] = host
	} else {
		var b strings.Builder
		b.Grow((len(chain) + 2) * 24)
		b.Write(client.AppendTo(ab[:0]))
		for _, a := range chain {
			b.WriteString(", ")
			b.Write(a.AppendTo(ab[:0]))
		}
		if !alone {
			b.WriteString(", ")
			b.Write(peer.AppendTo(ab[:0]))
		}
		vals[0] = b.String()
	}
	h["X-Forwarded-For"] = vals[0:1:1]
	if name != "X-Forwarded-For" && name != "Forwarded" {
		// The chain without the peer, which did not write itself there.
		v := vals[0]
		if !alone {
			v = v[:strings.LastIndex(v, ", ")]
		}
		h[name] = []string{v}
	}
	if _, ok := in.Header["Forwarded"]; ok || name == "Forwarded" {
		var b strings.Builder
		for i, a := range append(append([]netip.Addr{client}, chain...), peer) {
			if alone && i > 0 {
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("for=")
			if a.Is6() {
				b.WriteString(`"[`)
				b.Write(a.AppendTo(ab[:0]))
				b.WriteString(`]"`)
			} else {
				b.Write(a.AppendTo(ab[:0]))
			}
		}
		h["Forwarded"] = []string{b.String()}
	}
	var one []string
	for _, n := range config.ClientAddressHeaders {
		if _, ok := h[n]; ok && n != name {
			if one == nil {
				one = []string{client.String()}
			}
			h[n] = one
		}
	}
}
