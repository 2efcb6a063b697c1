package proxy

import (
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// FuzzClientKey: for any peer address and forwarding headers, key
// extraction does not panic, a peer that is not a trusted proxy gets the
// same key whatever X-Forwarded-For and Forwarded say, and a trusted one
// the same key whatever Forwarded says (only X-Forwarded-For, the
// configured header, is read); the X-Forwarded-For sent upstream starts
// with the keyed client.
func FuzzClientKey(f *testing.F) {
	f.Add("203.0.113.7:5000", "198.51.100.1", "for=198.51.100.2", "k")
	f.Add("127.0.0.2:1", "10.0.0.1, 198.51.100.1", `for="[2001:db8::1]:80";proto=https, for=unknown`, "")
	f.Add("[2001:db8::5]:443", "", `for=_hidden, for="\"quoted\""`, "x,y")
	f.Add("garbage", "::ffff:1.2.3.4", "FOR=1.2.3.4;by=5.6.7.8", "")
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32"), netip.MustParsePrefix("10.0.0.0/8")}
	keyOf := func(t *testing.T, remote, xff, fwd, hdr string) (string, keyResult) {
		r, _ := http.NewRequest("GET", "http://h/p?q=1", nil)
		r.RemoteAddr = remote
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if fwd != "" {
			r.Header.Set("Forwarded", fwd)
		}
		r.Header.Set("X-Key", hdr)
		p := &policy.Policy{Policy: config.Policy{
			Key:       []config.KeyPart{{Kind: config.KeyIP}, {Kind: config.KeyHeader, Name: "X-Key"}},
			OnMissing: config.MissingShared,
		}}
		return clientKey(r, p, &config.Server{TrustedProxies: trusted, IPv6Prefix: 128, ClientIPHeader: "X-Forwarded-For"})
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd, hdr string) {
		if strings.ContainsAny(xff+fwd+hdr, "\r\n") {
			return // not a header value net/http would deliver
		}
		k1, r1 := keyOf(t, remote, xff, fwd, hdr)
		ap, err := netip.ParseAddrPort(remote)
		if err != nil {
			return
		}
		if isTrusted(ap.Addr().Unmap(), trusted) {
			if k2, r2 := keyOf(t, remote, xff, "", hdr); k1 != k2 || r1 != r2 {
				t.Fatalf("trusted peer %s: key %q with Forwarded %q, %q without", remote, k1, fwd, k2)
			}
			s := &config.Server{TrustedProxies: trusted, ClientIPHeader: "X-Forwarded-For"}
			in := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {xff}, "Forwarded": {fwd}}}
			out := &http.Request{Header: http.Header{}}
			setForwarded(&httputil.ProxyRequest{In: in, Out: out}, s)
			c, _ := clientIP(in, s)
			if got := out.Header.Get("X-Forwarded-For"); !strings.HasPrefix(got+",", c.String()+",") {
				t.Fatalf("trusted peer %s, X-Forwarded-For %q: upstream gets %q, keyed %v", remote, xff, got, c)
			}
			return
		}
		k2, r2 := keyOf(t, remote, "", "", hdr)
		if k1 != k2 || r1 != r2 {
			t.Fatalf("untrusted peer %s: key %q with forwarding headers, %q without", remote, k1, k2)
		}
	})
}
