package identity

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // each must be in the error
	}{
		{"no keys", Config{}, []string{"no keys: set JWKSFile, JWKSURL or Secret"}},
		{"file and URL", Config{JWKSFile: "a", JWKSURL: "https://idp.example/jwks"}, []string{"JWKSFile and JWKSURL: set one, not both"}},
		{"plain http", Config{JWKSURL: "http://idp.example/jwks"}, []string{`JWKSURL "http://idp.example/jwks": must be https, or http to a loopback address`}},
		{"no host", Config{JWKSURL: "https:///jwks"}, []string{"no host"}},
		{"bad URL", Config{JWKSURL: "https://[::1"}, []string{`JWKSURL "https://[::1"`}},
		{"header and cookie", Config{Secret: testSecret, Source: Source{Header: "X", Cookie: "c"}}, []string{"Source: set Header or Cookie, not both"}},
		{"none", Config{JWKSFile: "a", Algorithms: []string{"none"}}, []string{`"none" is never allowed`}},
		{"empty list", Config{JWKSFile: "a", Algorithms: []string{}}, []string{"Algorithms: empty"}},
		{"unknown", Config{JWKSFile: "a", Algorithms: []string{"RS256", "rs256"}}, []string{`unknown algorithm "rs256"`}},
		{"HS256 without secret", Config{JWKSFile: "a", Algorithms: []string{"RS256", "HS256"}}, []string{"HS256 needs Secret: HMAC tokens are never verified with keys of a JWKS"}},
		{"RS256 without JWKS", Config{Secret: testSecret, Algorithms: []string{"HS256", "RS256"}}, []string{"RS256 needs JWKSFile or JWKSURL"}},
		{"short secret", Config{Secret: testSecret[:31]}, []string{"Secret: 31 bytes, under the 32 that HS256 needs"}},
		{"short for HS512", Config{Secret: testSecret, Algorithms: []string{"HS512"}}, []string{"Secret: 32 bytes, under the 64 that HS512 needs"}},
		{"secret unused", Config{JWKSFile: "a", Secret: testSecret, Algorithms: []string{"RS256"}}, []string{"Secret is set but Algorithms allows no HS256"}},
		{"negative", Config{Secret: testSecret, MinRefetch: -time.Second}, []string{"must not be negative"}},
		{"every problem at once", Config{JWKSFile: "a", JWKSURL: "http://x", Algorithms: []string{"none", "HS256"}}, []string{
			"set one, not both", "must be https", `"none"`, "HS256 needs Secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, Options{})
			if err == nil {
				t.Fatal("New: no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v\nwant %q in it", err, w)
				}
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		algs []string
	}{
		{Config{JWKSFile: "a"}, []string{"RS256", "ES256", "EdDSA"}},
		{Config{Secret: testSecret}, []string{"HS256"}},
		{Config{JWKSURL: "https://idp.example/jwks", Secret: testSecret}, []string{"RS256", "ES256", "EdDSA", "HS256"}},
		{Config{JWKSFile: "a", Algorithms: []string{"PS256", "ES512"}}, []string{"PS256", "ES512"}},
	} {
		s, err := tc.cfg.check()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.algs, tc.algs) {
			t.Errorf("%+v: algorithms %v, want %v", tc.cfg, s.algs, tc.algs)
		}
		if s.leeway != DefaultLeeway || s.RefreshInterval != DefaultRefreshInterval || s.FetchTimeout != DefaultFetchTimeout ||
			s.MinRefetch != DefaultMinRefetch || s.CacheSize != DefaultCacheSize {
			t.Errorf("defaults: %+v", s)
		}
	}
}

func TestURLRules(t *testing.T) {
	for raw, ok := range map[string]bool{
		"https://idp.example/jwks":  true,
		"http://127.0.0.1:8080/k":   true,
		"http://127.9.9.9/k":        true,
		"http://[::1]:80/k":         true,
		"http://LOCALHOST/k":        true,
		"http://10.0.0.1/k":         false,
		"http://idp.example/k":      false,
		"http://localhost.evil.io/": false,
		"ftp://idp.example/k":       false,
		"file:///etc/jwks.json":     false,
	} {
		if err := checkURL(raw); (err == nil) != ok {
			t.Errorf("checkURL(%q) = %v, want ok %v", raw, err, ok)
		}
	}
	// The default client holds redirects to the same rules.
	c := defaultClient()
	for raw, ok := range map[string]bool{"https://idp.example/jwks": true, "http://idp.example/jwks": false} {
		u, _ := url.Parse(raw)
		if err := c.CheckRedirect(&http.Request{URL: u}, make([]*http.Request, 1)); (err == nil) != ok {
			t.Errorf("redirect to %s: %v, want ok %v", raw, err, ok)
		}
	}
	u, _ := url.Parse("https://idp.example/jwks")
	if err := c.CheckRedirect(&http.Request{URL: u}, make([]*http.Request, 5)); err == nil {
		t.Error("a sixth redirect was followed")
	}
}
