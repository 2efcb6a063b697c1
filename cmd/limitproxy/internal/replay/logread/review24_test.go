package logread_test

import (
	"net/netip"
	"testing"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/replay/logread"
)

// TestReview24ClientVarLiveRules: with -client-var, the client is taken
// from the logged list by the live proxy's rules (the client-address
// walk of internal/proxy): an X-Forwarded-For list is a list of
// addresses, so an RFC 7239 element in it is not an address and stops
// the walk as it stops the proxy's; a Forwarded list is split at commas
// outside quotes, so a quoted for= holding a comma is one element, not
// an address. Before, the log reader had a walk of its own that read
// both as addresses a client wrote and keyed the request by them.
func TestReview24ClientVarLiveRules(t *testing.T) {
	const format = `$remote_addr "$http_x_forwarded_for" "$http_forwarded" [$time_iso8601] "$request"`
	line := func(xff, fwd string) string {
		return `10.0.0.2 "` + xff + `" "` + fwd + `" [2026-11-22T18:46:44+00:00] "GET /x HTTP/1.1"`
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tt := range []struct {
		clientVar, xff, fwd string
		want                string
	}{
		{"$http_x_forwarded_for", "203.0.113.7, 10.0.0.9", "-", "203.0.113.7"},
		{"$http_x_forwarded_for", "203.0.113.7, for=198.51.100.1, 10.0.0.9", "-", "10.0.0.9"},
		{"$http_x_forwarded_for", "for=198.51.100.1", "-", "10.0.0.2"},
		{"$http_forwarded", "-", "for=203.0.113.7, for=10.0.0.9", "203.0.113.7"},
		{"$http_forwarded", "-", `for=203.0.113.7, for="198.51.100.1, 10.0.0.8", for=10.0.0.9`, "10.0.0.9"},
		{"$http_forwarded", "-", `for=203.0.113.7;proto=https, for="[2001:db8::7]:4711";by=10.0.0.1, for=10.0.0.9`, "2001:db8::7"},
	} {
		o := logread.NginxOptions{LogFormat: format, ClientVar: tt.clientVar, TrustedProxies: trusted}
		r := readOne(t, line(tt.xff, tt.fwd), o)
		if r.Client != netip.MustParseAddr(tt.want) {
			t.Errorf("%s, X-Forwarded-For %q, Forwarded %q: Client %v, want %s", tt.clientVar, tt.xff, tt.fwd, r.Client, tt.want)
		}
	}
}

// TestReview24ClientVarTrustedHops: NginxOptions.TrustedHops is [server]
// trusted_hops: the N-th element from the right, whatever its address;
// the peer with fewer elements or a non-address there.
func TestReview24ClientVarTrustedHops(t *testing.T) {
	const format = `$remote_addr "$http_x_forwarded_for" [$time_iso8601] "$request"`
	for _, tt := range []struct {
		xff  string
		hops int
		want string
	}{
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", 1, "10.0.0.9"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", 2, "203.0.113.7"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", 3, "1.1.1.1"},
		{"1.1.1.1, 203.0.113.7, 10.0.0.9", 4, "10.0.0.2"},
		{"junk, 10.0.0.9", 2, "10.0.0.2"},
		{"1.1.1.1", 0, "1.1.1.1"},
	} {
		o := logread.NginxOptions{LogFormat: format, ClientVar: "$http_x_forwarded_for", TrustedHops: tt.hops,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
		r := readOne(t, `10.0.0.2 "`+tt.xff+`" [2026-11-22T18:46:44+00:00] "GET /x HTTP/1.1"`, o)
		if r.Client != netip.MustParseAddr(tt.want) {
			t.Errorf("X-Forwarded-For %q, trusted_hops %d: Client %v, want %s", tt.xff, tt.hops, r.Client, tt.want)
		}
	}
}
