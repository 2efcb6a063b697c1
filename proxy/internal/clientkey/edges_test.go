package clientkey

import (
	"net/http"
	"testing"
)

// TestFirstHeaderValue: a header key part is the first element of the
// first line: a comma inside double quotes does not end it, a backslash
// escapes only inside quotes.
func TestFirstHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		`a, b`:          "a",
		`"x,y", z`:      `"x,y"`,
		`"x\",y", z`:    `"x\",y"`,
		`a\,b`:          `a\`,
		` , b`:          "",
		`"unterminated`: `"unterminated`,
	} {
		got, ok := firstHeaderValue(http.Header{"X-Key": {in, "second"}}, "X-Key")
		if got != want || ok != (want != "") {
			t.Errorf("firstHeaderValue(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// TestParseHop: the spellings of one address in a forwarding header
// are one address; anything else is no address.
func TestParseHop(t *testing.T) {
	for in, want := range map[string]string{
		" 198.51.100.1 ":       "198.51.100.1",
		`"198.51.100.1"`:       "198.51.100.1",
		`"198.51.100.1:8080"`:  "198.51.100.1",
		"[2001:db8::1]":        "2001:db8::1",
		"[2001:db8::1]:80":     "2001:db8::1",
		`"[2001:db8::1]:80"`:   "2001:db8::1",
		"[::ffff:203.0.113.7]": "203.0.113.7",
		"fe80::1%eth0":         "fe80::1",
		`"`:                    "",
		`""`:                   "",
		`"198.51.100.1`:        "",
		`198.51.100.1"`:        "",
		"[":                    "",
		"[]":                   "",
		"[2001:db8::1":         "",
		"2001:db8::1]":         "",
		"[198.51.100.1]x":      "",
	} {
		a, err := parseHop(in)
		if (err == nil) != (want != "") || (err == nil && a.String() != want) {
			t.Errorf("parseHop(%q) = %v, %v; want %q", in, a, err, want)
		}
	}
}

// TestLenientUnescape: a name's escapes are decoded as PHP decodes them,
// and what is no escape is kept.
func TestLenientUnescape(t *testing.T) {
	for in, want := range map[string]string{"a+b": "a b", "%41%4": "A%4", "x%4": "x%4", "%zz": "%zz", "%4z1": "%4z1", "ab12": "ab12", "%": "%", "%41": "A"} {
		if got := lenientUnescape(in); got != want {
			t.Errorf("lenientUnescape(%q) = %q, want %q", in, got, want)
		}
	}
}
