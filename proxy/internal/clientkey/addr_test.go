package clientkey

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestParsePeer: ParsePeer reads the forms a RemoteAddr takes, unmapped
// and without a zone, and refuses strings that are not addresses.
func TestParsePeer(t *testing.T) {
	for _, c := range []struct {
		remote string
		want   string // "" for not an address
	}{
		{"192.0.2.7:5555", "192.0.2.7"},
		{"[2001:db8::1]:80", "2001:db8::1"},
		{"[::ffff:192.0.2.9]:1", "192.0.2.9"},
		{"[fe80::1%eth0]:1", "fe80::1"},
		{"198.51.100.1", "198.51.100.1"},
		{"::1", "::1"},
		{"::ffff:192.0.2.10", "192.0.2.10"},
		{"", ""},
		{"pipe", ""},
		{"192.0.2.7:", ""},
		{"192.0.2.777:1", ""},
		{"@", ""},
		{"0.0.0.0:0", "0.0.0.0"},
		{"255.255.255.255:65535", "255.255.255.255"},
		{"192.0.2.7:00080", "192.0.2.7"},
		{"192.0.2.7:65536", ""},
		{"192.0.2.7:000065535", "192.0.2.7"}, // netip's way: ParseUint takes any leading zeros
		{"192.0.2.07:1", ""},
		{"192.0.2.256:1", ""},
		{"192.0.2:1", ""},
		{"192.0.2.7.8:1", ""},
		{"192.0.2.7:+1", ""},
		{"192.0.2.7:1a", ""},
		{"192.0.2.7:-1", ""},
		{"1920.0.2.7:1", ""},
	} {
		a, ok := ParsePeer(c.remote)
		if c.want == "" {
			if ok {
				t.Errorf("ParsePeer(%q) = %v, want not an address", c.remote, a)
			}
			continue
		}
		if !ok || a != netip.MustParseAddr(c.want) {
			t.Errorf("ParsePeer(%q) = %v, %v; want %s", c.remote, a, ok, c.want)
		}
	}
}

func BenchmarkParsePeer(b *testing.B) {
	for b.Loop() {
		ParsePeer("127.0.0.1:54321")
	}
}

// TestResolveTrusted: a peer inside trusted_proxies is Trusted (its
// X-Request-Id and forwarding header are believed), on a connection not
// marked peer-only; any other peer is not, nor a request whose RemoteAddr
// is no address.
func TestResolveTrusted(t *testing.T) {
	s := &config.Server{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, c := range []struct {
		remote   string
		peerOnly bool
		trusted  bool
		client   string
	}{
		{"10.1.2.3:1", false, true, "198.51.100.7"},
		{"10.1.2.3:1", true, false, "10.1.2.3"},
		{"192.0.2.1:1", false, false, "192.0.2.1"},
		{"pipe", false, false, "invalid IP"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		if c.peerOnly {
			r = r.WithContext(WithPeerOnly(r.Context(), func() bool { return true }))
		}
		got := Resolve(r, s)
		if got.Trusted != c.trusted || got.Addr.String() != c.client {
			t.Errorf("%s (peer-only %v): Trusted %v, client %s; want %v, %s", c.remote, c.peerOnly, got.Trusted, got.Addr, c.trusted, c.client)
		}
	}
}

// TestHeader: the header a key part reads, for [log] access_replay's
// list: a header part's own, Cookie for a cookie part, none for the
// others.
func TestHeader(t *testing.T) {
	for _, c := range []struct {
		part config.KeyPart
		want string
	}{
		{config.KeyPart{Kind: config.KeyHeader, Name: "X-Api-Key"}, "X-Api-Key"},
		{config.KeyPart{Kind: config.KeyCookie, Name: "sid"}, "Cookie"},
		{config.KeyPart{Kind: config.KeyQuery, Name: "k"}, ""},
		{config.KeyPart{Kind: config.KeyIP}, ""},
		{config.KeyPart{Kind: config.KeyPath}, ""},
	} {
		if got, ok := Header(c.part); got != c.want || ok != (c.want != "") {
			t.Errorf("Header(%s) = %q, %v; want %q", c.part, got, ok, c.want)
		}
	}
}

// FuzzParsePeer: ParsePeer reads every RemoteAddr as netip does
// (parseIPv4Port's quick way for "a.b.c.d:port" changes no answer).
func FuzzParsePeer(f *testing.F) {
	for _, s := range []string{"192.0.2.7:5555", "0.0.0.0:0", "255.255.255.255:65535", "1.2.3.4:00080", "1.2.3.4:65536",
		"01.2.3.4:1", "1.2.3.4", "[::1]:80", "::1", "1.2.3.4:", "1.2.3.4:1:2", "1.2.3.4.5:6", "[1.2.3.4]:5", "1.2.3.4%eth0:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, gotOK := ParsePeer(s)
		var want netip.Addr
		wantOK := true
		if ap, err := netip.ParseAddrPort(s); err == nil {
			want = ap.Addr().Unmap().WithZone("")
		} else if a, err := netip.ParseAddr(s); err == nil {
			want = a.Unmap().WithZone("")
		} else {
			wantOK = false
		}
		if got != want || gotOK != wantOK {
			t.Errorf("ParsePeer(%q) = %v, %v; netip reads %v, %v", s, got, gotOK, want, wantOK)
		}
	})
}
