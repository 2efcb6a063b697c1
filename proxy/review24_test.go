package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestReview24NulInKeyedName: PHP reads a parameter or cookie name only up
// to a NUL byte (php_register_variable_ex walks the name as a C string),
// so ?k=FRESH&k%00=REAL is k=REAL to $_GET (the last) and
// Cookie: sid%00=REAL; sid=FRESH is sid=REAL to $_COOKIE (the first).
// Keyed by FRESH, a client would be a fresh key on each request while a
// PHP upstream serves REAL: such a request is ambiguous, and rewritten
// it keeps the one occurrence it was keyed by.
func TestReview24NulInKeyedName(t *testing.T) {
	for _, c := range []struct {
		kind      config.KeyKind
		cookies   []string
		query     string
		rewrite   string
		cookieOut []string
		queryOut  string
	}{
		{kind: config.KeyQuery, query: "k=FRESH&k%00=REAL", rewrite: "FRESH", queryOut: "k=FRESH"},
		{kind: config.KeyQuery, query: "k%00junk=REAL&k=FRESH", rewrite: "FRESH", queryOut: "k=FRESH"},
		{kind: config.KeyQuery, query: "k%00=REAL", rewrite: "", queryOut: ""},
		{kind: config.KeyCookie, cookies: []string{"sid%00=REAL; sid=FRESH"}, rewrite: "FRESH", cookieOut: []string{"sid=FRESH"}},
		{kind: config.KeyCookie, cookies: []string{"sid%00x=REAL; a=1", "sid=FRESH"}, rewrite: "FRESH", cookieOut: []string{"a=1", "sid=FRESH"}},
	} {
		name := "sid"
		if c.kind == config.KeyQuery {
			name = "k"
		}
		part := config.KeyPart{Kind: c.kind, Name: name}
		req := func() *http.Request {
			r := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: c.query}}
			if c.cookies != nil {
				r.Header["Cookie"] = slices.Clone(c.cookies)
			}
			return r
		}
		if v, st := keyedPart(req(), part, config.AmbiguousReject); st != partAmbiguous {
			t.Errorf("%s %q %q: keyed %q (state %d), want refused as ambiguous", part, c.cookies, c.query, v, st)
		}
		r := req()
		v, _ := keyedPart(r, part, config.AmbiguousRewrite)
		if v != c.rewrite {
			t.Errorf("%s %q %q rewrite: keyed %q, want %q", part, c.cookies, c.query, v, c.rewrite)
		}
		rewriteParts(r, []config.KeyPart{part})
		if c.kind == config.KeyCookie && !slices.Equal(r.Header["Cookie"], c.cookieOut) {
			t.Errorf("%s %q rewritten: %q, want %q", part, c.cookies, r.Header["Cookie"], c.cookieOut)
		}
		if c.kind == config.KeyQuery && r.URL.RawQuery != c.queryOut {
			t.Errorf("%s %q rewritten: %q, want %q", part, c.query, r.URL.RawQuery, c.queryOut)
		}
	}
}

// TestReview24StreamsSharedKey: max_streams_per_key bounds one client's
// streams, never everyone's. A key that names no client — one whose parts
// are missing under on_missing = "shared" ("-;"), a limit's skip marker,
// or no key at all — is counted per client address, so that a client
// without the keyed header cannot take every place of all the others
// that lack it. A key that names one (here a header value) stays one
// bound for all its addresses.
func TestReview24StreamsSharedKey(t *testing.T) {
	s := &config.Server{}
	u := &config.Upstream{Name: "up", MaxStreamsPerKey: 1}
	lim := bodyLimits{}
	parts := []config.KeyPart{{Kind: config.KeyHeader, Name: "X-Tenant"}}
	req := func(addr, tenant string) *http.Request {
		r := httptest.NewRequest("POST", "/s", strings.NewReader("x"))
		r.RemoteAddr = addr + ":1234"
		if tenant != "" {
			r.Header.Set("X-Tenant", tenant)
		}
		return r
	}
	admit := func(h *Handler, key string, r *http.Request) bool {
		w := &recorder{ResponseWriter: httptest.NewRecorder(), key: key}
		_, ok := h.admitStream(w, r, u, lim, s)
		return ok
	}
	shared, res := keyOf(req("192.0.2.1", ""), parts, config.MissingShared, s)
	if res != keyOK || shared == "" {
		t.Fatalf("keyOf without the header: %q %v", shared, res)
	}
	for _, key := range []string{shared, limiter.SkipKey, ""} {
		h := &Handler{}
		if !admit(h, key, req("192.0.2.1", "")) {
			t.Fatalf("key %q: the first stream of 192.0.2.1 refused", key)
		}
		if admit(h, key, req("192.0.2.1", "")) {
			t.Errorf("key %q: a second stream of 192.0.2.1 admitted over max_streams_per_key 1", key)
		}
		if !admit(h, key, req("198.51.100.2", "")) {
			t.Errorf("key %q: 198.51.100.2's first stream refused because 192.0.2.1 holds one: the bound is global", key)
		}
	}
	h := &Handler{}
	tenant, _ := keyOf(req("192.0.2.1", "acme"), parts, config.MissingShared, s)
	if !admit(h, tenant, req("192.0.2.1", "acme")) || admit(h, tenant, req("198.51.100.2", "acme")) {
		t.Errorf("key %q: one client key from two addresses must share its bound", tenant)
	}
}
