package proxy

import (
	"context"
	"net/netip"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy/internal/clientkey"
)

// Client keys are built in one room, proxy/internal/clientkey: the client
// address (worked out once a request, as it arrives), the kinds of key
// parts and how each is read, keyed cookies and query parameters, and
// the key's form. What other packages need of it is here.

// KeyFor builds the client key of policy p from raw values of its key
// parts, in order, the way the data path builds it from a request: an ip
// part is parsed and grouped by ipv6_prefix, the others are taken as they
// are. The admin API uses it to find one client's state.
func KeyFor(p *policy.Policy, s *config.Server, values []string) (string, error) {
	return clientkey.For(p, s, values)
}

// KeyParts splits a key that KeyFor or a request built into its parts'
// values; false if key is not one (a key a limit of its own builds with
// on_missing markers decodes as far as it can).
func KeyParts(key string) ([]string, bool) { return clientkey.Parts(key) }

// ClientFromHeader returns the client named by the field lines of a
// client-address header named header ("X-Forwarded-For", "Forwarded",
// any other a list of addresses) that a trusted peer sent, by the rules
// the live proxy keys requests by: walked from the right past trusted,
// or with hops > 0 the hops-th element from the right; peer when the
// lines name no client. The replay's log reader uses it, so that a
// logged list is read as the proxy would read it. Safe for concurrent
// use.
func ClientFromHeader(peer netip.Addr, lines []string, header string, trusted []netip.Prefix, hops int) netip.Addr {
	return clientkey.FromHeader(peer, lines, header, trusted, hops)
}

// WithPeerOnly returns a copy of ctx, a connection's base context (as
// http.Server.ConnContext makes it), under which a request whose peer is
// a trusted proxy is keyed by that peer's address all the same when
// peerOnly returns true: no forwarding header it carries is believed.
// The server uses it for a connection a load balancer opened with a PROXY
// protocol LOCAL or UNKNOWN header, which names no client. peerOnly is
// called once for each such request, after the request was read, and
// possibly from several goroutines at once (HTTP/2 streams); it must be
// safe for that.
func WithPeerOnly(ctx context.Context, peerOnly func() bool) context.Context {
	return clientkey.WithPeerOnly(ctx, peerOnly)
}
