package clientkey

import (
	"net/netip"
	"testing"
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
