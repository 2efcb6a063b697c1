package proxy

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestSetForwardedHostProto holds setForwarded to httputil's SetXForwarded
// for X-Forwarded-Host and X-Forwarded-Proto, over TLS and not, and for
// X-Forwarded-For from an untrusted peer, with and without a port.
func TestSetForwardedHostProto(t *testing.T) {
	for _, remote := range []string{"203.0.113.7:4000", "[2001:db8::1]:4000"} {
		for _, tlsOn := range []bool{false, true} {
			in := &http.Request{RemoteAddr: remote, Host: "api.example:8080", Header: http.Header{"X-Forwarded-For": {"10.9.8.1"}}}
			if tlsOn {
				in.TLS = &tls.ConnectionState{}
			}
			want := &httputil.ProxyRequest{In: in, Out: &http.Request{Header: http.Header{}}}
			want.SetXForwarded()
			got := &httputil.ProxyRequest{In: in, Out: &http.Request{Header: http.Header{}}}
			setForwarded(got, srvFor("", 0))
			if !reflect.DeepEqual(got.Out.Header, want.Out.Header) {
				t.Errorf("%s tls %v: %v, SetXForwarded %v", remote, tlsOn, got.Out.Header, want.Out.Header)
			}
		}
	}
}

// srvFor is a [server] as config.Parse leaves it: header "" means the
// default, X-Forwarded-For.
func srvFor(header string, hops int, trusted ...string) *config.Server {
	s := &config.Server{ClientIPHeader: http.CanonicalHeaderKey(header), TrustedHops: hops, IPv6Prefix: 64}
	if header == "" {
		s.ClientIPHeader = config.DefaultClientIPHeader
	}
	for _, p := range trusted {
		s.TrustedProxies = append(s.TrustedProxies, netip.MustParsePrefix(p))
	}
	return s
}

// TestClientIPOneSource: the client address comes from the peer and,
// behind a trusted proxy, from the one configured header only, read as
// documented; every other forwarding header changes nothing.
func TestClientIPOneSource(t *testing.T) {
	lb := srvFor("", 0, "127.0.0.2/32", "10.0.0.0/8")
	for _, c := range []struct {
		name   string
		s      *config.Server
		remote string
		header http.Header
		want   string
	}{
		// The probe: the balancer appended the real client to
		// X-Forwarded-For and passed the client's Forwarded through.
		{"forwarded ignored", lb, "127.0.0.2:1", http.Header{"Forwarded": {"for=10.9.8.1"}, "X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"x-real-ip ignored", lb, "127.0.0.2:1", http.Header{"X-Real-Ip": {"10.9.8.1"}, "X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"only other headers", lb, "127.0.0.2:1", http.Header{"Forwarded": {"for=10.9.8.1"}, "X-Real-Ip": {"10.9.8.2"}, "Cf-Connecting-Ip": {"10.9.8.3"}}, "127.0.0.2"},
		{"spoofed left part", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"10.9.8.1, 198.51.100.1, 203.0.113.7"}}, "203.0.113.7"},
		{"trusted hops skipped", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"198.51.100.1, 203.0.113.7, 10.0.0.5, 10.0.0.6"}}, "203.0.113.7"},
		{"repeated lines", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"198.51.100.1", "203.0.113.7, 10.0.0.5", "10.0.0.6"}}, "203.0.113.7"},
		{"empty elements", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {" , 198.51.100.1,, 203.0.113.7 , ", ""}}, "203.0.113.7"},
		{"unknown hop", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"203.0.113.7, unknown, 10.0.0.5"}}, "10.0.0.5"},
		{"obfuscated hop", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"203.0.113.7, _hidden"}}, "127.0.0.2"},
		{"garbage", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"1.2.3.4.5, <script>"}}, "127.0.0.2"},
		{"all trusted", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"10.0.0.1, 10.0.0.2"}}, "10.0.0.1"},
		{"ipv6 bracket port", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"[2001:db8::1]:4711"}}, "2001:db8::1"},
		{"ipv6 bare", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"2001:db8::1"}}, "2001:db8::1"},
		{"ipv6 brackets", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"[2001:db8::1]"}}, "2001:db8::1"},
		{"ipv6 zone dropped", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"fe80::1%eth7"}}, "fe80::1"},
		{"ipv4-mapped", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"::ffff:203.0.113.7"}}, "203.0.113.7"},
		{"ipv4 port", lb, "127.0.0.2:1", http.Header{"X-Forwarded-For": {"203.0.113.7:5555"}}, "203.0.113.7"},
		{"untrusted peer", lb, "203.0.113.9:1", http.Header{"X-Forwarded-For": {"203.0.113.7"}, "Forwarded": {"for=1.2.3.4"}, "X-Real-Ip": {"1.2.3.5"}}, "203.0.113.9"},
		{"ipv6 peer", lb, "[2001:db8::9]:1", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "2001:db8::9"},

		{"forwarded configured", srvFor("Forwarded", 0, "127.0.0.2/32"), "127.0.0.2:1", http.Header{"Forwarded": {`for="[2001:db8::1]:4711"`}, "X-Forwarded-For": {"203.0.113.7"}}, "2001:db8::1"},
		{"forwarded params", srvFor("Forwarded", 0, "127.0.0.2/32"), "127.0.0.2:1", http.Header{"Forwarded": {`for=10.9.8.1;proto=https, For="198.51.100.7";by=10.0.0.1`}}, "198.51.100.7"},
		{"forwarded quoted comma", srvFor("Forwarded", 0, "127.0.0.2/32"), "127.0.0.2:1", http.Header{"Forwarded": {`for="10.9.8.1,x", for=198.51.100.7`}}, "198.51.100.7"},
		{"forwarded lines", srvFor("Forwarded", 0, "127.0.0.2/32", "10.0.0.0/8"), "127.0.0.2:1", http.Header{"Forwarded": {"for=10.9.8.1", "for=198.51.100.7, for=10.0.0.3"}}, "198.51.100.7"},
		{"forwarded unknown", srvFor("Forwarded", 0, "127.0.0.2/32"), "127.0.0.2:1", http.Header{"Forwarded": {"for=203.0.113.7, for=unknown"}}, "127.0.0.2"},
		{"forwarded no for", srvFor("Forwarded", 0, "127.0.0.2/32"), "127.0.0.2:1", http.Header{"Forwarded": {"for=203.0.113.7, proto=https"}}, "127.0.0.2"},

		{"x-real-ip configured", srvFor("x-real-ip", 0, "127.0.0.2/32"), "127.0.0.2:1", http.Header{"X-Real-Ip": {"203.0.113.7"}, "X-Forwarded-For": {"10.9.8.1"}}, "203.0.113.7"},
		{"named configured", srvFor("CF-Connecting-IP", 0, "127.0.0.2/32"), "127.0.0.2:1", http.Header{"Cf-Connecting-Ip": {"2001:db8::7"}, "X-Forwarded-For": {"10.9.8.1"}, "True-Client-Ip": {"10.9.8.2"}}, "2001:db8::7"},
		{"named absent", srvFor("CF-Connecting-IP", 0, "127.0.0.2/32"), "127.0.0.2:1", http.Header{"X-Forwarded-For": {"10.9.8.1"}}, "127.0.0.2"},

		// trusted_hops: the N-th element from the right, whatever it is.
		{"hops 1", srvFor("", 1, "10.0.0.0/8"), "10.1.2.3:1", http.Header{"X-Forwarded-For": {"10.9.8.1, 203.0.113.7"}}, "203.0.113.7"},
		{"hops 2", srvFor("", 2, "10.0.0.0/8"), "10.1.2.3:1", http.Header{"X-Forwarded-For": {"10.9.8.1, 203.0.113.7, 198.51.100.50"}}, "203.0.113.7"},
		{"hops 2 lines", srvFor("", 2, "10.0.0.0/8"), "10.1.2.3:1", http.Header{"X-Forwarded-For": {"10.9.8.1, 203.0.113.7", "198.51.100.50"}}, "203.0.113.7"},
		{"hops fewer", srvFor("", 2, "10.0.0.0/8"), "10.1.2.3:1", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "10.1.2.3"},
		{"hops garbage", srvFor("", 2, "10.0.0.0/8"), "10.1.2.3:1", http.Header{"X-Forwarded-For": {"203.0.113.7, unknown, 198.51.100.50"}}, "10.1.2.3"},
		{"hops trusted element", srvFor("", 1, "10.0.0.0/8"), "10.1.2.3:1", http.Header{"X-Forwarded-For": {"10.0.0.9"}}, "10.0.0.9"},
		{"hops untrusted peer", srvFor("", 1, "10.0.0.0/8"), "203.0.113.9:1", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "203.0.113.9"},
	} {
		r := &http.Request{RemoteAddr: c.remote, Header: c.header}
		got, ok := clientIP(r, c.s)
		if !ok || got.String() != c.want {
			t.Errorf("%s: clientIP = %v, %v; want %s", c.name, got, ok, c.want)
		}
	}
}

// TestClientIPPeerOnly: on a connection marked peer-only (a PROXY LOCAL
// or UNKNOWN header from a balancer), a trusted peer's headers are not
// believed.
func TestClientIPPeerOnly(t *testing.T) {
	s := srvFor("", 0, "127.0.0.2/32")
	for _, only := range []bool{false, true} {
		ctx := WithPeerOnly(context.Background(), func() bool { return only })
		r := (&http.Request{RemoteAddr: "127.0.0.2:1", Header: http.Header{"X-Forwarded-For": {"203.0.113.7"}}}).WithContext(ctx)
		want := "203.0.113.7"
		if only {
			want = "127.0.0.2"
		}
		if got, _ := clientIP(r, s); got.String() != want {
			t.Errorf("peer only %v: %v, want %s", only, got, want)
		}
	}
}

// TestSetClientHeaders: every client-address header the upstream gets
// names the client the request was keyed by.
func TestSetClientHeaders(t *testing.T) {
	lb := srvFor("", 0, "127.0.0.2/32", "10.0.0.0/8")
	for _, c := range []struct {
		name   string
		s      *config.Server
		remote string
		in     http.Header
		want   http.Header
	}{
		{"probe", lb, "127.0.0.2:1",
			http.Header{"X-Forwarded-For": {"10.9.8.1, 203.0.113.7"}, "Forwarded": {"for=10.9.8.2"}, "X-Real-Ip": {"10.9.8.3"}, "True-Client-Ip": {"10.9.8.4"}, "Accept": {"*/*"}},
			http.Header{"X-Forwarded-For": {"203.0.113.7, 127.0.0.2"}, "Forwarded": {"for=203.0.113.7, for=127.0.0.2"}, "X-Real-Ip": {"203.0.113.7"}, "True-Client-Ip": {"203.0.113.7"}, "Accept": {"*/*"}}},
		{"trusted hops kept", lb, "127.0.0.2:1",
			http.Header{"X-Forwarded-For": {"10.9.8.1", "203.0.113.7, 10.0.0.5"}},
			http.Header{"X-Forwarded-For": {"203.0.113.7, 10.0.0.5, 127.0.0.2"}}},
		{"unknown hop dropped", lb, "127.0.0.2:1",
			http.Header{"X-Forwarded-For": {"203.0.113.7, unknown, 10.0.0.5"}},
			http.Header{"X-Forwarded-For": {"10.0.0.5, 127.0.0.2"}}},
		{"untrusted peer", lb, "203.0.113.9:1",
			http.Header{"X-Forwarded-For": {"10.9.8.1"}, "X-Real-Ip": {"10.9.8.3"}, "Cf-Connecting-Ip": {"10.9.8.5"}},
			http.Header{"X-Forwarded-For": {"203.0.113.9"}, "X-Real-Ip": {"203.0.113.9"}, "Cf-Connecting-Ip": {"203.0.113.9"}}},
		{"no header", lb, "127.0.0.2:1", http.Header{}, http.Header{"X-Forwarded-For": {"127.0.0.2"}}},
		{"ipv6", srvFor("Forwarded", 0, "::1/128"), "[::1]:1",
			http.Header{"Forwarded": {`for="[2001:db8::1]:4711";proto=https`}, "X-Forwarded-For": {"10.9.8.1"}},
			http.Header{"X-Forwarded-For": {"2001:db8::1, ::1"}, "Forwarded": {`for="[2001:db8::1]", for="[::1]"`}}},
		{"named", srvFor("CF-Connecting-IP", 0, "127.0.0.2/32"), "127.0.0.2:1",
			http.Header{"Cf-Connecting-Ip": {"10.9.8.5, 203.0.113.7"}, "X-Forwarded-For": {"10.9.8.1"}},
			http.Header{"Cf-Connecting-Ip": {"203.0.113.7"}, "X-Forwarded-For": {"203.0.113.7, 127.0.0.2"}}},
		{"named absent", srvFor("CF-Connecting-IP", 0, "127.0.0.2/32"), "127.0.0.2:1",
			http.Header{},
			http.Header{"Cf-Connecting-Ip": {"127.0.0.2"}, "X-Forwarded-For": {"127.0.0.2"}}},
		{"hops", srvFor("", 2, "10.0.0.0/8"), "10.1.2.3:1",
			http.Header{"X-Forwarded-For": {"10.9.8.1, 203.0.113.7, 198.51.100.50"}},
			http.Header{"X-Forwarded-For": {"203.0.113.7, 198.51.100.50, 10.1.2.3"}}},
	} {
		in := &http.Request{RemoteAddr: c.remote, Header: c.in}
		out := &http.Request{Header: c.in.Clone()}
		// As httputil.ReverseProxy leaves it before Rewrite.
		delete(out.Header, "X-Forwarded-For")
		delete(out.Header, "Forwarded")
		setForwarded(&httputil.ProxyRequest{In: in, Out: out}, c.s)
		delete(out.Header, "X-Forwarded-Host")
		delete(out.Header, "X-Forwarded-Proto")
		if !reflect.DeepEqual(out.Header, c.want) {
			t.Errorf("%s: %v, want %v", c.name, out.Header, c.want)
		}
		// What the upstream reads agrees with the key.
		key, _ := clientIP(in, c.s)
		if v := out.Header.Get("X-Forwarded-For"); !slices.Contains([]string{key.String()}, firstElem(v)) {
			t.Errorf("%s: X-Forwarded-For %q does not start with the keyed client %v", c.name, v, key)
		}
	}
}

func firstElem(v string) string {
	for i := 0; i < len(v); i++ {
		if v[i] == ',' {
			return v[:i]
		}
	}
	return v
}

// TestClientIPFromHeader: ClientFromHeader, replay's reading of a logged
// client-address header, reads it as the proxy does: Forwarded's for=
// parameter when the header is Forwarded (in any case), X-Forwarded-For's
// bare list otherwise; walked from the right past trusted peers, or the
// hops-th element from the right; the peer when the lines name no client.
func TestClientIPFromHeader(t *testing.T) {
	peer := netip.MustParseAddr("10.0.0.1")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, c := range []struct {
		header string
		lines  []string
		hops   int
		want   string
	}{
		{"forwarded", []string{"for=192.0.2.7"}, 0, "192.0.2.7"},
		{"Forwarded", []string{`for="[2001:db8::7]:80";proto=https, for=10.0.0.2`}, 0, "2001:db8::7"},
		{"X-Forwarded-For", []string{"for=192.0.2.7"}, 0, "10.0.0.1"}, // not an address: the peer
		{"X-Forwarded-For", []string{"192.0.2.7, 10.0.0.2"}, 0, "192.0.2.7"},
		{"X-Forwarded-For", []string{"192.0.2.9", "192.0.2.7, 10.0.0.2"}, 0, "192.0.2.7"},
		{"X-Forwarded-For", []string{"192.0.2.7, 198.51.100.1"}, 1, "198.51.100.1"},
		{"X-Forwarded-For", []string{"192.0.2.7, 198.51.100.1"}, 2, "192.0.2.7"},
		{"X-Forwarded-For", []string{"192.0.2.7"}, 2, "10.0.0.1"}, // fewer elements than hops
		{"X-Forwarded-For", nil, 0, "10.0.0.1"},
	} {
		if got := ClientFromHeader(peer, c.lines, c.header, trusted, c.hops); got.String() != c.want {
			t.Errorf("ClientFromHeader(%s: %q, hops %d) = %v, want %s", c.header, c.lines, c.hops, got, c.want)
		}
	}
}
