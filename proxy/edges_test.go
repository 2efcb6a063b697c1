package proxy

// Edges of the client key and of host canonicalization that the other
// tests do not pin: IPv4 clients under a short ipv6_prefix, a host
// capitalised in its first or last letter only, and a peer address that
// does not parse.

import (
	"net/http"
	"testing"

	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

func edgePolicy(onMissing config.OnMissing, parts ...config.KeyPart) *policy.Policy {
	return &policy.Policy{Policy: config.Policy{Name: "p", Key: parts, OnMissing: onMissing}}
}

func edgeKey(remote string, p *policy.Policy, s *config.Server) (string, keyResult) {
	r := &http.Request{Method: "GET", RemoteAddr: remote, Host: "h", Header: http.Header{"X-Key": {"v"}}}
	return clientKey(r, p, s)
}

// TestEdgeIPv4NotGrouped: ipv6_prefix groups IPv6 clients only. With a
// prefix of 32 bits or less (allowed), an IPv4 address, bare or mapped
// into IPv6, must keep all its bits, or IPv4 clients would share a bucket.
func TestEdgeIPv4NotGrouped(t *testing.T) {
	ip := config.KeyPart{Kind: config.KeyIP}
	p := edgePolicy(config.MissingReject, ip)
	for _, bits := range []int{0, 8, 24, 32} {
		s := &config.Server{IPv6Prefix: bits}
		for _, c := range []struct{ a, b string }{
			{"203.0.113.7:1", "203.0.113.8:1"},
			{"[::ffff:203.0.113.7]:1", "[::ffff:198.51.100.7]:1"},
		} {
			ka, ra := edgeKey(c.a, p, s)
			kb, rb := edgeKey(c.b, p, s)
			if ra != keyOK || rb != keyOK || ka == kb {
				t.Errorf("ipv6_prefix %d: %s and %s keyed %q (%v) and %q (%v), want two keys", bits, c.a, c.b, ka, ra, kb, rb)
			}
		}
		for _, v := range []string{"203.0.113.7", "::ffff:203.0.113.7"} {
			if k, err := KeyFor(p, s, []string{v}); err != nil || k != "11:203.0.113.7;" {
				t.Errorf("ipv6_prefix %d: KeyFor(%s) = %q, %v; want the whole address", bits, v, k, err)
			}
		}
	}
	// IPv6 clients are grouped: with 32 bits, one /32 is one client.
	s := &config.Server{IPv6Prefix: 32}
	ka, _ := edgeKey("[2001:db8:1::1]:1", p, s)
	kb, _ := edgeKey("[2001:db8:ffff::2]:1", p, s)
	if ka != kb || ka != "10:2001:db8::;" {
		t.Errorf("ipv6_prefix 32: keys %q and %q, want both 10:2001:db8::;", ka, kb)
	}
}

// TestEdgeHostOneCapital: a host with a single capital letter, first or
// last (the bounds of the A–Z test), is lowered like any other.
func TestEdgeHostOneCapital(t *testing.T) {
	for in, want := range map[string]string{
		"Api.example.com":      "api.example.com",
		"Zeta.example.com":     "zeta.example.com",
		"api.example.coM":      "api.example.com",
		"api.example.coZ:8080": "api.example.coz:8080",
		"A":                    "a",
		"Z.":                   "z",
		"[::1]:8080":           "[::1]:8080",
		"@[`.example.{":        "@[`.example.{", // the bytes around A–Z stay
	} {
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEdgeUnparseablePeer: a peer address that does not parse is no
// address: the ip key part is missing and on_missing decides (reject,
// skip, a shared "-" part), never a key made of the invalid address.
func TestEdgeUnparseablePeer(t *testing.T) {
	ip := config.KeyPart{Kind: config.KeyIP}
	hdr := config.KeyPart{Kind: config.KeyHeader, Name: "X-Key"}
	s := srvFor("", 0, "10.0.0.0/8")
	for _, remote := range []string{"garbage", "", "203.0.113.7:", "[::1", "300.1.2.3:80", "unix:/run/sock"} {
		if a, ok := clientIP(&http.Request{RemoteAddr: remote}, s); ok {
			t.Errorf("clientIP(%q) = %v, true; want not ok", remote, a)
		}
		for _, c := range []struct {
			on   config.OnMissing
			key  string
			want keyResult
		}{
			{config.MissingReject, "", keyReject},
			{config.MissingSkip, "", keySkip},
			{config.MissingShared, "-;1:v;", keyOK},
		} {
			if k, res := edgeKey(remote, edgePolicy(c.on, ip, hdr), s); k != c.key || res != c.want {
				t.Errorf("peer %q, on_missing %s: key %q (%v), want %q (%v)", remote, c.on, k, res, c.key, c.want)
			}
		}
	}
	// A bare address (no port) is an address.
	if k, res := edgeKey("203.0.113.7", edgePolicy(config.MissingReject, ip), s); res != keyOK || k != "11:203.0.113.7;" {
		t.Errorf("bare peer address: key %q (%v)", k, res)
	}
}
