package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/pires/go-proxyproto"

	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// proxyProtocolListener wraps the proxy's raw TCP listener for [server]
// proxy_protocol (docs/configuration.md): the PROXY protocol header, v1 or
// v2, comes first on a connection, before any TLS, so this goes under the
// TLS listener. A peer in trusted() (proxy_protocol_from, read at each
// connection, so that it follows reloads) must send one: a connection of
// its without a header, or with one that is malformed or carries no TCP
// address, fails its first read and is closed with nothing written. The
// address a PROXY command carries becomes the connection's remote address,
// which keys, X-Forwarded-For and logs then see; a LOCAL command (a load
// balancer's health check, or a v1 UNKNOWN) keeps the real peer, and
// peerOnlyConn makes none of its forwarding headers believed. A connection
// from any other peer that starts with a header is refused the same way,
// and one without is served as it comes. timeout bounds the wait for the
// header (the server's read_header_timeout), so that a silent peer cannot
// hold a connection.
func proxyProtocolListener(ln net.Listener, trusted func() []netip.Prefix, timeout time.Duration) net.Listener {
	if timeout <= 0 {
		// read_header_timeout "0s" means no limit for net/http; the header
		// wait is bounded all the same.
		timeout = config.DefaultReadHeaderTimeout
	}
	return &proxyproto.Listener{
		Listener: ln,
		ConnPolicy: func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			peer, ok := addrOf(o.Upstream)
			if !ok {
				// Wrapping ErrInvalidUpstream closes this connection
				// only; Accept goes on.
				return proxyproto.REJECT, fmt.Errorf("%w: peer address %v", proxyproto.ErrInvalidUpstream, o.Upstream)
			}
			for _, p := range trusted() {
				if p.Contains(peer) {
					return proxyproto.REQUIRE, nil
				}
			}
			return proxyproto.REJECT, nil
		},
		ValidateHeader:    validateProxyHeader,
		ReadHeaderTimeout: timeout,
	}
}

// peerOnlyConn is the http.Server's ConnContext with proxy_protocol: a
// connection that a load balancer opened with a LOCAL or UNKNOWN header
// names no client, so its requests are keyed by the balancer's own
// address, whatever forwarding headers they carry (proxy.WithPeerOnly);
// a balancer listed in trusted_proxies would otherwise have its
// connections' X-Forwarded-For believed, which there the client wrote.
// The header is looked at when a request needs it, after the connection
// has been read from, never here in the accept loop.
func peerOnlyConn(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	pc, ok := c.(*proxyproto.Conn)
	if !ok {
		return ctx
	}
	return proxy.WithPeerOnly(ctx, func() bool {
		h := pc.ProxyHeader()
		return h != nil && (h.Command.IsLocal() || h.TransportProtocol == proxyproto.UNSPEC)
	})
}

// validateProxyHeader accepts a LOCAL command, and a PROXY command that
// carries TCP over IPv4 or IPv6 (a UDP or Unix socket address would make
// no client address).
func validateProxyHeader(h *proxyproto.Header) error {
	if h.Command.IsLocal() {
		return nil
	}
	if src, _, ok := h.TCPAddrs(); !ok || src == nil || src.IP == nil {
		return fmt.Errorf("proxy protocol: the header carries %#x, not TCP over IPv4 or IPv6", byte(h.TransportProtocol))
	}
	return nil
}

// addrOf returns the IP address of a connection's peer, IPv4-mapped IPv6
// unmapped (as the proxy compares addresses with trusted_proxies).
func addrOf(a net.Addr) (netip.Addr, bool) {
	if t, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(t.IP)
		return ip.Unmap(), ok
	}
	if a == nil {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}
