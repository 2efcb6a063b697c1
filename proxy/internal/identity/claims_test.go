package identity

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

func decodeClaims(t *testing.T, payload string) Claims {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(payload)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return Claims{m: m}
}

func TestClaimsGet(t *testing.T) {
	c := decodeClaims(t, `{
		"sub": "alice",
		"org": {"id": 42, "name": "Acme", "team": {"id": "t-1"}, "tags": ["a"]},
		"big": 12345678901234567890123,
		"ratio": 1.5e3,
		"admin": true,
		"off": false,
		"nothing": null,
		"roles": ["admin", "dev"],
		"https://example.com/org": "namespaced",
		"a.b": "dotted name",
		"a": {"b": "nested"},
		"x": {"y.z": "dotted inside"},
		"": "empty name"
	}`)
	for _, tc := range []struct {
		path string
		want string
		ok   bool
	}{
		{"sub", "alice", true},
		{"org.id", "42", true},
		{"org.name", "Acme", true},
		{"org.team.id", "t-1", true},
		{"big", "12345678901234567890123", true},
		{"ratio", "1.5e3", true},
		{"admin", "true", true},
		{"off", "false", true},
		{"https://example.com/org", "namespaced", true},
		{"a.b", "dotted name", true}, // the whole name first
		{"x.y.z", "dotted inside", true},
		{"", "empty name", true},
		{"org", "", false},      // an object
		{"roles", "", false},    // an array
		{"org.tags", "", false}, // an array
		{"nothing", "", false},  // null
		{"absent", "", false},
		{"sub.x", "", false},
		{"org.id.x", "", false},
		{"org.", "", false},
	} {
		got, ok := c.Get(tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Get(%q) = %q, %v, want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := (Claims{}).Get("sub"); ok || got != "" {
		t.Errorf("zero Claims: Get = %q, %v", got, ok)
	}
}

func TestClaimsValues(t *testing.T) {
	c := decodeClaims(t, `{"roles": ["admin", "dev"], "ids": [1, true, "x"], "mixed": ["a", {"b": 1}],
		"holes": ["a", null], "nested": [["a"]], "empty": [], "sub": "alice", "org": {"id": 7}, "nothing": null}`)
	for _, tc := range []struct {
		path string
		want []string
		ok   bool
	}{
		{"roles", []string{"admin", "dev"}, true},
		{"ids", []string{"1", "true", "x"}, true},
		{"empty", []string{}, true},
		{"sub", []string{"alice"}, true},
		{"org.id", []string{"7"}, true},
		{"mixed", nil, false},
		{"holes", nil, false},
		{"nested", nil, false},
		{"org", nil, false},
		{"nothing", nil, false},
		{"absent", nil, false},
	} {
		got, ok := c.Values(tc.path)
		if !slices.Equal(got, tc.want) || ok != tc.ok || (ok && got == nil) {
			t.Errorf("Values(%q) = %q, %v, want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// TestClaimsJSONRoundTrip: what JSON writes of a claim, FromJSON reads
// back to the same Get and Values, for every kind of value (a big number
// keeps its text, a nested path is found flat), and FromJSON refuses text
// that is not one JSON value.
func TestClaimsJSONRoundTrip(t *testing.T) {
	c := decodeClaims(t, `{"sub": "alice", "org": {"id": 42}, "big": 12345678901234567890123, "admin": true, "roles": ["admin", 7], "obj": {"a": 1}, "nothing": null}`)
	paths := []string{"sub", "org.id", "big", "admin", "roles", "obj", "nothing"}
	byPath := map[string]string{}
	for _, p := range paths {
		v, ok := c.JSON(p)
		if !ok {
			t.Fatalf("JSON(%q): none", p)
		}
		byPath[p] = v
	}
	if byPath["sub"] != `"alice"` || byPath["big"] != "12345678901234567890123" || byPath["roles"] != `["admin",7]` {
		t.Fatalf("JSON texts: %v", byPath)
	}
	if _, ok := c.JSON("org.missing"); ok {
		t.Fatal("JSON of a path that names nothing")
	}
	back, err := FromJSON(byPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		g1, ok1 := c.Get(p)
		g2, ok2 := back.Get(p)
		v1, vok1 := c.Values(p)
		v2, vok2 := back.Values(p)
		if g1 != g2 || ok1 != ok2 || !slices.Equal(v1, v2) || vok1 != vok2 {
			t.Errorf("%s: Get %q %v / %q %v, Values %v %v / %v %v", p, g1, ok1, g2, ok2, v1, vok1, v2, vok2)
		}
	}
	for _, bad := range []string{`alice`, `"a" "b"`, ``} {
		if _, err := FromJSON(map[string]string{"sub": bad}); err == nil {
			t.Errorf("FromJSON(%q) passed", bad)
		}
	}
}
