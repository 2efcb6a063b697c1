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
