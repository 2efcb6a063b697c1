package proxy

import (
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/limitproxy/limitproxy/internal/config"
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
