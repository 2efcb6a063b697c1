package proxy

import (
	"net/url"
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	tests := []struct {
		in, raw, decoded string
		err              error
	}{
		{"", "/", "/", nil},
		{"/", "/", "/", nil},
		{"/login", "/login", "/login", nil},
		{"/login/", "/login/", "/login/", nil},
		{"//login", "/login", "/login", nil},
		{"///login//", "/login/", "/login/", nil},
		{"/./login", "/login", "/login", nil},
		{"/a/../login", "/login", "/login", nil},
		{"/a/b/../../login", "/login", "/login", nil},
		{"/a/./b/.", "/a/b/", "/a/b/", nil},
		{"/a/b/..", "/a/", "/a/", nil},
		{"/a/..", "/", "/", nil},
		{"/.", "/", "/", nil},
		{"/%6cogin", "/login", "/login", nil},
		{"/%6C%6F%67%69%6E", "/login", "/login", nil},
		{"/%2e/login", "/login", "/login", nil},
		{"/a/%2e%2E/login", "/login", "/login", nil},
		{"/.well-known/acme-challenge/%2e%2e/%2e%2e/login", "/login", "/login", nil},
		{"/LOGIN", "/LOGIN", "/LOGIN", nil},
		{"/login;x", "/login;x", "/login;x", nil},
		{"/a%3fb", "/a%3Fb", "/a?b", nil},
		{"/a%25b", "/a%25b", "/a%b", nil},
		{"/a b", "/a%20b", "/a b", nil},
		{"/caf\xc3\xa9", "/caf%C3%A9", "/caf\xc3\xa9", nil},
		{"/a\"b", "/a%22b", "/a\"b", nil},
		{"/repos/a%2fb", "/repos/a%2Fb", "/repos/a/b", nil},
		{"/repos/a%2Fb/x", "/repos/a%2Fb/x", "/repos/a/b/x", nil},
		{"/a\\b", "/a%5Cb", "/a\\b", nil},
		{"/..", "", "", errEscapesRoot},
		{"/../login", "", "", errEscapesRoot},
		{"/%2e%2e/login", "", "", errEscapesRoot},
		{"/a/../../login", "", "", errEscapesRoot},
		{"/login%00", "", "", errNUL},
		{"/login%", "", "", errBadEscape},
		{"/login%4", "", "", errBadEscape},
		{"/login%zz", "", "", errBadEscape},
		{"/a%2f..%2flogin", "", "", errEncodedSep},
		{"/a%2F%2Flogin", "", "", errEncodedSep},
		{"/login%2f", "", "", errEncodedSep},
		{"/%2flogin", "", "", errEncodedSep},
		{"/a%5c..%5clogin", "", "", errEncodedSep},
		{"/a\\..\\login", "", "", errEncodedSep},
		{"*", "", "", errNotPath},
		{"login", "", "", errNotPath},
	}
	for _, tt := range tests {
		raw, decoded, err := normalizePath(tt.in)
		if err != tt.err || raw != tt.raw || decoded != tt.decoded {
			t.Errorf("normalizePath(%q) = %q, %q, %v; want %q, %q, %v", tt.in, raw, decoded, err, tt.raw, tt.decoded, tt.err)
		}
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"example.com":               "example.com",
		"Example.COM":               "example.com",
		"limited.example.com.":      "limited.example.com",
		"limited.example.com.:8080": "limited.example.com:8080",
		"LIMITED.example.com:80":    "limited.example.com:80",
		"[::1]:8080":                "[::1]:8080",
		"[FE80::1]":                 "[fe80::1]",
		"127.0.0.1:80":              "127.0.0.1:80",
		"":                          "",
	} {
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCaseVariant(t *testing.T) {
	for m, want := range map[string]bool{
		"GET": false, "POST": false, "PURGE": false, "purge": false, "MKCOL": false,
		"get": true, "Post": true, "pOST": true, "trace": true, "connect": true, "patch": true,
	} {
		if got := caseVariant(m); got != want {
			t.Errorf("caseVariant(%q) = %v, want %v", m, got, want)
		}
	}
}

// FuzzNormalizePath checks normalizePath's promises on any input: its
// output is idempotent, starts with "/", never climbs above the root or
// holds a dot segment or repeated slash, and decodes to the decoded form,
// as Go's URL parser (what an upstream in Go would use) decodes it.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "//login", "/a/../login", "/%2e%2e/x", "/a%2fb", "/x%00", "/a b", "/a/./b/", "/%41%7e", "/a\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		raw, decoded, err := normalizePath(in)
		if err != nil {
			return
		}
		if !strings.HasPrefix(raw, "/") {
			t.Fatalf("normalizePath(%q) = %q: not absolute", in, raw)
		}
		raw2, decoded2, err := normalizePath(raw)
		if err != nil || raw2 != raw || decoded2 != decoded {
			t.Fatalf("normalizePath(%q) = %q, %q; again: %q, %q, %v", in, raw, decoded, raw2, decoded2, err)
		}
		for _, seg := range strings.Split(raw[1:], "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("normalizePath(%q) = %q: dot segment", in, raw)
			}
		}
		if strings.Contains(raw, "//") {
			t.Fatalf("normalizePath(%q) = %q: repeated slash", in, raw)
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("normalizePath(%q) = %q: url.Parse: %v", in, raw, err)
		}
		if u.Path != decoded {
			t.Fatalf("normalizePath(%q) = %q, decoded %q; url.Parse decodes %q", in, raw, decoded, u.Path)
		}
		if u.EscapedPath() != raw {
			t.Fatalf("normalizePath(%q) = %q; Go would forward %q", in, raw, u.EscapedPath())
		}
	})
}
