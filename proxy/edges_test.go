package proxy

// Edges of the client key and of host canonicalization that the other
// tests do not pin: IPv4 clients under a short ipv6_prefix, a host
// capitalised in its first or last letter only, and a peer address that
// does not parse.

import (
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/limiter"
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
		"[::1].":               "[::1].", // after the bracket is the port's place
		"[X]":                  "[x]",
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

// TestEdgeKeyParts: KeyParts splits what KeyFor and the data path build,
// and refuses what they cannot have built.
func TestEdgeKeyParts(t *testing.T) {
	for _, c := range []struct {
		key   string
		parts []string
		ok    bool
	}{
		{"", nil, true},
		{"11:203.0.113.7;", []string{"203.0.113.7"}, true},
		{"0:;3:a;b;", []string{"", "a;b"}, true},
		{"3:abc;2:de;", []string{"abc", "de"}, true},
		{"3:abc", []string{"3:abc"}, false},   // no ';'
		{"3:ab;", []string{"3:ab;"}, false},   // shorter than its length
		{"2:abc;", []string{"2:abc;"}, false}, // ';' missing at the length
		{"-1:x;", []string{"-1:x;"}, false},
		{"x:1;", []string{"x:1;"}, false},
		{"abc", []string{"abc"}, false},
		{"3:abc;-;", []string{"abc", "-;"}, false}, // an on_missing marker
	} {
		parts, ok := KeyParts(c.key)
		if ok != c.ok || strings.Join(parts, "|") != strings.Join(c.parts, "|") || len(parts) != len(c.parts) {
			t.Errorf("KeyParts(%q) = %q, %v; want %q, %v", c.key, parts, ok, c.parts, c.ok)
		}
	}
}

// TestEdgeKeyFor: KeyFor builds the key the data path builds, and refuses
// a wrong number of values or an ip part that is not an address.
func TestEdgeKeyFor(t *testing.T) {
	ip := config.KeyPart{Kind: config.KeyIP}
	hdr := config.KeyPart{Kind: config.KeyHeader, Name: "X-Key"}
	p := edgePolicy(config.MissingReject, ip, hdr)
	s := &config.Server{IPv6Prefix: 64}
	if k, err := KeyFor(p, s, []string{"2001:db8::1", "v"}); err != nil || k != "10:2001:db8::;1:v;" {
		t.Errorf("KeyFor = %q, %v", k, err)
	}
	if k, _ := edgeKey("[2001:db8::99]:1", p, s); k != "10:2001:db8::;1:v;" {
		t.Errorf("data path key %q, want what KeyFor builds", k)
	}
	for _, vs := range [][]string{{"2001:db8::1"}, {"2001:db8::1", "v", "w"}, {"not-an-address", "v"}} {
		if k, err := KeyFor(p, s, vs); err == nil {
			t.Errorf("KeyFor(%q) = %q, want an error", vs, k)
		}
	}
	// A non-ip part is taken as it is, even if it looks like an address.
	if k, err := KeyFor(edgePolicy(config.MissingReject, hdr), s, []string{"2001:db8::1"}); err != nil || k != "11:2001:db8::1;" {
		t.Errorf("KeyFor(header) = %q, %v", k, err)
	}
}

// TestEdgeKeyOnMissing: each key part read from a request, and what each
// on_missing makes of an absent one.
func TestEdgeKeyOnMissing(t *testing.T) {
	s := &config.Server{IPv6Prefix: 64}
	r := &http.Request{Method: "PATCH", RemoteAddr: "203.0.113.7:1", Host: "API.Example.com:8080", URL: &url.URL{Path: "/a/b"}, Header: http.Header{"X-Key": {"v"}}}
	all := []config.KeyPart{{Kind: config.KeyHost}, {Kind: config.KeyMethod}, {Kind: config.KeyPath}, {Kind: config.KeyHeader, Name: "X-Key"}}
	if k, res := clientKey(r, edgePolicy(config.MissingReject, all...), s); res != keyOK || k != "15:api.example.com;5:PATCH;4:/a/b;1:v;" {
		t.Errorf("host, method, path, header: %q (%v)", k, res)
	}
	missing := config.KeyPart{Kind: config.KeyHeader, Name: "X-Absent"}
	hdr := config.KeyPart{Kind: config.KeyHeader, Name: "X-Key"}
	for _, c := range []struct {
		on   config.OnMissing
		key  string
		want keyResult
	}{
		{config.MissingShared, "-;1:v;", keyOK},
		{config.MissingIP, "ip=203.0.113.7", keyOK},
		{config.MissingSkip, "", keySkip},
		{config.MissingReject, "", keyReject},
	} {
		if k, res := clientKey(r, edgePolicy(c.on, missing, hdr), s); k != c.key || res != c.want {
			t.Errorf("on_missing %s: %q (%v), want %q (%v)", c.on, k, res, c.key, c.want)
		}
	}
}

// TestEdgeLimitKeys: limits with keys of their own get one key each, the
// same key built once; a limit whose key the request lacks is skipped or
// rejects it as its on_missing says; all skipped skips the request.
func TestEdgeLimitKeys(t *testing.T) {
	s := &config.Server{IPv6Prefix: 64}
	ip := config.LimitKey{Parts: []config.KeyPart{{Kind: config.KeyIP}}, OnMissing: config.MissingReject}
	hdr := config.LimitKey{Parts: []config.KeyPart{{Kind: config.KeyHeader, Name: "X-Key"}}, OnMissing: config.MissingReject}
	absentSkip := config.LimitKey{Parts: []config.KeyPart{{Kind: config.KeyHeader, Name: "X-Absent"}}, OnMissing: config.MissingSkip}
	absentReject := config.LimitKey{Parts: []config.KeyPart{{Kind: config.KeyHeader, Name: "X-Absent"}}, OnMissing: config.MissingReject}
	r := &http.Request{Method: "GET", RemoteAddr: "203.0.113.7:1", Header: http.Header{"X-Key": {"v"}}}
	for _, c := range []struct {
		lks  []config.LimitKey
		keys []string
		want keyResult
	}{
		{[]config.LimitKey{ip, hdr, ip}, []string{"11:203.0.113.7;", "1:v;", "11:203.0.113.7;"}, keyOK},
		{[]config.LimitKey{hdr, absentSkip}, []string{"1:v;", limiter.SkipKey}, keyOK},
		{[]config.LimitKey{absentSkip, absentSkip}, []string{limiter.SkipKey, limiter.SkipKey}, keySkip},
		{[]config.LimitKey{hdr, absentReject}, nil, keyReject},
	} {
		p := &policy.Policy{Policy: config.Policy{Name: "p", LimitKeys: c.lks, OwnKeys: true}}
		keys := make([]string, len(c.lks))
		res := limitKeys(r, p, s, keys)
		if res != c.want || (c.keys != nil && strings.Join(keys, "|") != strings.Join(c.keys, "|")) {
			t.Errorf("limit keys %v: %q (%v), want %q (%v)", c.lks, keys, res, c.keys, c.want)
		}
	}
}

// TestEdgeFirstHeaderValue: the upstream is left the one value of a
// header key part (clientkey's TestFirstHeaderValue: which one).
func TestEdgeFirstHeaderValue(t *testing.T) {
	hdr := config.KeyPart{Kind: config.KeyHeader, Name: "X-Key"}
	p := edgePolicy(config.MissingReject, config.KeyPart{Kind: config.KeyMethod}, hdr)
	for _, c := range []struct {
		in   []string
		want []string
	}{
		{[]string{"a, junk", "more"}, []string{"a"}},
		{[]string{"a"}, []string{"a"}},
		{[]string{" , x"}, nil},
		{nil, nil},
	} {
		h := http.Header{"X-Other": {"1, 2", "3"}}
		if c.in != nil {
			h["X-Key"] = c.in
		}
		pinKeyHeaders(&http.Request{Header: h}, p)
		if strings.Join(h["X-Key"], "|") != strings.Join(c.want, "|") || (c.want == nil && h["X-Key"] != nil) || len(h["X-Other"]) != 2 {
			t.Errorf("pinKeyHeaders(%q) left %q (and X-Other %q), want %q", c.in, h["X-Key"], h["X-Other"], c.want)
		}
	}
}

// TestEdgeTrustedHops: with trusted_hops = 1 the client is the element
// nearest to the trusted peer, even when that element is itself a trusted
// address (it is not walked past, as it would be with trusted_hops = 0).
func TestEdgeTrustedHops(t *testing.T) {
	h := http.Header{"X-Forwarded-For": {"198.51.100.1, 10.0.0.9"}}
	for hops, want := range map[int]string{0: "198.51.100.1", 1: "10.0.0.9", 2: "198.51.100.1", 3: "10.1.2.3"} {
		if got, ok := clientIP(&http.Request{RemoteAddr: "10.1.2.3:1", Header: h}, srvFor("", hops, "10.0.0.0/8")); !ok || got.String() != want {
			t.Errorf("trusted_hops %d: %v, want %s", hops, got, want)
		}
	}
}

// TestEdgeClientChain: the client and the trusted hops between it and the
// peer, left to right, for both ways of walking the header; empty
// elements are skipped, a for= is found among other pairs, and a Server
// without a header name reads X-Forwarded-For.
func TestEdgeClientChain(t *testing.T) {
	xff := func(v string) http.Header { return http.Header{"X-Forwarded-For": {v}} }
	for _, c := range []struct {
		name   string
		s      *config.Server
		h      http.Header
		client string
		hops   string
	}{
		{"recursive", srvFor("", 0, "10.0.0.0/8"), xff("198.51.100.1, 10.0.0.7, 10.0.0.8"), "198.51.100.1", "10.0.0.7 10.0.0.8"},
		{"recursive, all trusted", srvFor("", 0, "10.0.0.0/8"), xff("10.0.0.6, 10.0.0.7"), "10.0.0.6", "10.0.0.7"},
		{"recursive, unknown hop", srvFor("", 0, "10.0.0.0/8"), xff("198.51.100.1, unknown, 10.0.0.8"), "10.0.0.8", ""},
		{"leading comma", srvFor("", 0, "10.0.0.0/8"), xff(",198.51.100.1"), "198.51.100.1", ""},
		{"hops 2", srvFor("", 2, "10.0.0.0/8"), xff("198.51.100.1, 10.0.0.7, 10.0.0.8"), "10.0.0.7", "10.0.0.8"},
		{"hops 3", srvFor("", 3, "10.0.0.0/8"), xff("198.51.100.1, 10.0.0.7, 10.0.0.8"), "198.51.100.1", "10.0.0.7 10.0.0.8"},
		{"hops 3, garbage between", srvFor("", 3, "10.0.0.0/8"), xff("198.51.100.1, garbage, 10.0.0.8"), "198.51.100.1", "10.0.0.8"},
		{"hops 2, garbage chosen", srvFor("", 2, "10.0.0.0/8"), xff("garbage, 10.0.0.8"), "10.1.2.3", ""},
		{"hops 5, too few", srvFor("", 5, "10.0.0.0/8"), xff("198.51.100.1, 10.0.0.8"), "10.1.2.3", ""},
		{"forwarded, empty element", srvFor("Forwarded", 0, "10.0.0.0/8"), http.Header{"Forwarded": {"for=198.51.100.1,,for=10.0.0.5"}}, "198.51.100.1", "10.0.0.5"},
		{"forwarded, by before for", srvFor("Forwarded", 0, "10.0.0.0/8"), http.Header{"Forwarded": {"by=10.0.0.50;for=198.51.100.1"}}, "198.51.100.1", ""},
		{"forwarded, no for", srvFor("Forwarded", 0, "10.0.0.0/8"), http.Header{"Forwarded": {"by=198.51.100.1;proto=https"}}, "10.1.2.3", ""},
		{"no header name", &config.Server{TrustedProxies: srvFor("", 0, "10.0.0.0/8").TrustedProxies}, xff("198.51.100.1"), "198.51.100.1", ""},
	} {
		r := &http.Request{RemoteAddr: "10.1.2.3:1", Header: c.h}
		client, peer, hops, ok := resolveClient(r, c.s, []netip.Addr{})
		var hs []string
		for _, h := range hops {
			hs = append(hs, h.String())
		}
		if !ok || client.String() != c.client || peer.String() != "10.1.2.3" || strings.Join(hs, " ") != c.hops {
			t.Errorf("%s: client %v, peer %v, hops %v (%v); want %s, hops %q", c.name, client, peer, hs, ok, c.client, c.hops)
		}
	}
}

// TestEdgeKeyCookieParts: an ambiguous cookie after a missing part is
// refused when the key goes on past the missing part (on_missing shared);
// a cookie key part reads its value; a cookie named like a header leaves that header alone; and an
// ipv6_prefix of 128 keeps every IPv6 bit.
func TestEdgeKeyCookieParts(t *testing.T) {
	s := &config.Server{IPv6Prefix: 128, AmbiguousKeyParts: config.AmbiguousReject}
	missing := config.KeyPart{Kind: config.KeyHeader, Name: "X-Absent"}
	cookie := config.KeyPart{Kind: config.KeyCookie, Name: "X-Key"}
	r := &http.Request{Method: "GET", RemoteAddr: "[2001:db8::2]:1", Header: http.Header{"Cookie": {"X-Key=junk; X-Key=real"}, "X-Key": {"a, b"}}}
	if k, res := clientKey(r, edgePolicy(config.MissingShared, missing, cookie), s); res != keyInvalid {
		t.Errorf("on_missing shared, missing part then ambiguous cookie: %q (%v), want refused as ambiguous", k, res)
	}
	r.Header["Cookie"] = []string{"X-Key=real"}
	if v, ok := keyPart(r, cookie, s); !ok || v != "real" {
		t.Errorf("keyPart(cookie) = %q, %v", v, ok)
	}
	pinKeyHeaders(r, edgePolicy(config.MissingReject, cookie))
	if got := r.Header["X-Key"]; len(got) != 1 || got[0] != "a, b" {
		t.Errorf("a cookie part named X-Key changed the X-Key header: %q", got)
	}
	ip := edgePolicy(config.MissingReject, config.KeyPart{Kind: config.KeyIP})
	ka, _ := edgeKey("[2001:db8::2]:1", ip, s)
	kb, _ := edgeKey("[2001:db8::3]:1", ip, s)
	if ka == kb {
		t.Errorf("ipv6_prefix 128: 2001:db8::2 and ::3 share the key %q", ka)
	}
	s.IPv6Prefix = 127
	ka, _ = edgeKey("[2001:db8::2]:1", ip, s)
	kb, _ = edgeKey("[2001:db8::3]:1", ip, s)
	if ka != kb {
		t.Errorf("ipv6_prefix 127: 2001:db8::2 and ::3 keyed %q and %q, want one /127", ka, kb)
	}
}

// TestEdgeSetForwarded: what the upstream is told when the client is the
// peer and it sent Forwarded, when a quoted Forwarded value holds a comma,
// and when the peer address does not parse (a header named by
// client_ip_header is removed too).
func TestEdgeSetForwarded(t *testing.T) {
	for _, c := range []struct {
		name   string
		s      *config.Server
		remote string
		in     http.Header
		want   http.Header
	}{
		{"untrusted peer, Forwarded sent", srvFor("", 0, "10.0.0.0/8"), "203.0.113.9:1",
			http.Header{"Forwarded": {"for=10.9.8.1"}, "X-Forwarded-For": {"10.9.8.2"}},
			http.Header{"Forwarded": {"for=203.0.113.9"}, "X-Forwarded-For": {"203.0.113.9"}}},
		{"quoted comma", srvFor("Forwarded", 0, "10.0.0.0/8"), "10.1.2.3:1",
			http.Header{"Forwarded": {`for="198.51.100.1";ext="a,b", for=10.0.0.5`}},
			http.Header{"Forwarded": {"for=198.51.100.1, for=10.0.0.5, for=10.1.2.3"}, "X-Forwarded-For": {"198.51.100.1, 10.0.0.5, 10.1.2.3"}}},
		{"unparseable peer", srvFor("X-Client-Address", 0, "10.0.0.0/8"), "garbage",
			http.Header{"Forwarded": {"for=1.2.3.4"}, "X-Forwarded-For": {"1.2.3.4"}, "X-Client-Address": {"1.2.3.4"}, "X-Real-Ip": {"1.2.3.4"}, "Accept": {"*/*"}},
			http.Header{"Accept": {"*/*"}}},
	} {
		in := &http.Request{RemoteAddr: c.remote, Header: c.in}
		out := &http.Request{Header: c.in.Clone()}
		setForwarded(&httputil.ProxyRequest{In: in, Out: out}, c.s)
		out.Header.Del("X-Forwarded-Host") // TestSetForwardedHostProto's
		out.Header.Del("X-Forwarded-Proto")
		if len(out.Header) != len(c.want) {
			t.Errorf("%s: upstream headers %v, want %v", c.name, out.Header, c.want)
			continue
		}
		for k, v := range c.want {
			if strings.Join(out.Header[k], "|") != strings.Join(v, "|") {
				t.Errorf("%s: %s = %q, want %q", c.name, k, out.Header[k], v)
			}
		}
	}
}

// TestEdgeKeyedPartStates: what a cookie or query key part is, beyond its
// value: an empty value is absent, several are ambiguous (or, rewritten,
// the last well-formed one, even the first), and the places a cookie name
// can hide in another pair.
func TestEdgeKeyedPartStates(t *testing.T) {
	cookie := config.KeyPart{Kind: config.KeyCookie, Name: "sid"}
	for _, c := range []struct {
		cookie string
		mode   config.AmbiguousMode
		value  string
		st     partState
	}{
		{"sid=", config.AmbiguousReject, "", partAbsent},
		{`sid=""`, config.AmbiguousReject, "", partAbsent},
		{`sid="`, config.AmbiguousReject, "", partAmbiguous},
		{"sid=a~b", config.AmbiguousReject, "a~b", partPresent},
		{"sid=RE\x7fAL", config.AmbiguousReject, "", partAmbiguous},
		{"sid=junk; sid=REAL", config.AmbiguousReject, "", partAmbiguous},
		{"sid=REAL; sid", config.AmbiguousRewrite, "REAL", partPresent},
		{"sid=; sid", config.AmbiguousRewrite, "", partAbsent},
		{"a=1,sid=junk; sid=REAL", config.AmbiguousReject, "", partAmbiguous},
		{"a=1\tsid=junk; sid=REAL", config.AmbiguousReject, "", partAmbiguous},
		{",sid=junk; sid=REAL", config.AmbiguousReject, "", partAmbiguous},
		{"a=1 b; sid=REAL", config.AmbiguousReject, "REAL", partPresent},
	} {
		r := &http.Request{Header: http.Header{"Cookie": {c.cookie}}, URL: &url.URL{}}
		if v, st := keyedPart(r, cookie, c.mode); v != c.value || st != c.st {
			t.Errorf("cookie %q (%s): %q, %v; want %q, %v", c.cookie, c.mode, v, st, c.value, c.st)
		}
	}
	if v, st := keyedPart(&http.Request{Header: http.Header{"X-Key": {"v"}}}, config.KeyPart{Kind: config.KeyHeader, Name: "X-Key"}, config.AmbiguousReject); v != "" || st != partAbsent {
		t.Errorf("keyedPart of a header part: %q, %v", v, st)
	}
}

// TestEdgeNormalizePathEscapes: escapes at the end of a segment, half
// escapes, every unreserved character spelled escaped, and paths that
// only look like dot segments.
func TestEdgeNormalizePathEscapes(t *testing.T) {
	for _, c := range []struct {
		in, raw, decoded string
		err              error
	}{
		{"/a%41", "/aA", "/aA", nil},
		{"/a%41/b", "/aA/b", "/aA/b", nil},
		{"/%7a%5a%39%7e%2d%2e%5f", "/zZ9~-._", "/zZ9~-._", nil},
		{"/%61%41%30", "/aA0", "/aA0", nil},
		{"/a%4", "", "", errBadEscape},
		{"/a%", "", "", errBadEscape},
		{"/%4z", "", "", errBadEscape},
		{"/%z4", "", "", errBadEscape},
		{"/a/.b/..c/d.", "/a/.b/..c/d.", "/a/.b/..c/d.", nil},
		{"/\"", "/%22", "/\"", nil}, // a one-byte segment to escape
	} {
		raw, decoded, err := normalizePath(c.in)
		if err != c.err || raw != c.raw || decoded != c.decoded {
			t.Errorf("normalizePath(%q) = %q, %q, %v; want %q, %q, %v", c.in, raw, decoded, err, c.raw, c.decoded, c.err)
		}
	}
}

// TestEdgeKeyPartNames: a cookie name spelled with other capitals (A and
// Z included), dots or spaces, or escaped, is the same name to PHP-like
// parsers (clientkey's TestLenientUnescape: what is no escape); and the refusal names
// the ambiguous part.
func TestEdgeKeyPartNames(t *testing.T) {
	for _, c := range []struct{ name, cookie string }{
		{"aid", "Aid=junk; aid=REAL"},
		{"zid", "Zid=junk; zid=REAL"},
		{"a_b", "a.b=junk; a_b=REAL"},
		{"a_b", "a b=junk; a_b=REAL"},
		{"sid", "s%69d=junk; sid=REAL"},
	} {
		r := &http.Request{Header: http.Header{"Cookie": {c.cookie}}, URL: &url.URL{}}
		if _, st := keyedPart(r, config.KeyPart{Kind: config.KeyCookie, Name: c.name}, config.AmbiguousReject); st != partAmbiguous {
			t.Errorf("cookie %s in %q: %v, want ambiguous", c.name, c.cookie, st)
		}
	}
	p := edgePolicy(config.MissingReject, config.KeyPart{Kind: config.KeyCookie, Name: "ok"}, config.KeyPart{Kind: config.KeyCookie, Name: "sid"})
	r := &http.Request{Header: http.Header{"Cookie": {"ok=1; sid=a; sid=b"}}, URL: &url.URL{}}
	if got := ambiguousPart(r, p, config.AmbiguousReject); got != (config.KeyPart{Kind: config.KeyCookie, Name: "sid"}).String() {
		t.Errorf("ambiguousPart = %q, want the sid cookie", got)
	}
}

// TestEdgeCanonicalize: the path is taken from the request line as sent
// (an encoded slash stays apart from a slash), the decoded form replaces
// a stale raw one, a NUL byte is refused, and headers whose names hold an
// underscore anywhere, first byte included, are dropped unless allowed.
func TestEdgeCanonicalize(t *testing.T) {
	req := func(uri string) *http.Request {
		u, _ := url.ParseRequestURI(uri)
		return &http.Request{Method: "GET", RequestURI: uri, URL: u, Host: "h", Header: http.Header{"_X": {"1"}, "X_Y": {"2"}, "X-Z": {"3"}}}
	}
	r := req("/a%2Fb/%41?q=1")
	if st, d := canonicalize(r, &config.Server{}); st != 0 || r.URL.Path != "/a/b/A" || r.URL.RawPath != "/a%2Fb/A" || r.URL.RawQuery != "q=1" {
		t.Errorf("origin form: %d %s, path %q raw %q query %q", st, d, r.URL.Path, r.URL.RawPath, r.URL.RawQuery)
	}
	if len(r.Header) != 1 || r.Header.Get("X-Z") != "3" {
		t.Errorf("underscore headers left: %v", r.Header)
	}
	r = req("/plain")
	r.URL.RawPath = "/stale"
	if st, _ := canonicalize(r, &config.Server{UnderscoresInHeaders: true}); st != 0 || r.URL.Path != "/plain" || r.URL.RawPath != "" || len(r.Header) != 3 {
		t.Errorf("plain path: %d, path %q raw %q, headers %v", st, r.URL.Path, r.URL.RawPath, r.Header)
	}
	r = req("/a")
	r.RequestURI = "/a\x00b"
	if st, _ := canonicalize(r, &config.Server{}); st != http.StatusBadRequest {
		t.Errorf("NUL in the path: %d, want 400", st)
	}
	if _, _, err := normalizePath("/a\x00b"); err != errNUL {
		t.Errorf("normalizePath with NUL: %v", err)
	}
}
