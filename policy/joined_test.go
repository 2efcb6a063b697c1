package policy

import (
	"slices"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestSeenEntries: an entry found through a descriptor of another key is
// seen as the pattern's key with the rest of its KEY_VALUE; one of the
// pattern's key as it is; a bare key found by KEY_VALUE with no value.
func TestSeenEntries(t *testing.T) {
	s := compileRLS(t, "joined", `key = ["descriptor:a", "descriptor:x_y"]`, `descriptor = ["a=b_c", "x_y"]`)
	for _, c := range []struct{ in, want []DescriptorEntry }{
		{[]DescriptorEntry{{"a_b", "c"}, {"x", "y"}}, []DescriptorEntry{{"a", "b_c"}, {"x_y", ""}}},
		{[]DescriptorEntry{{"a", "b_c"}, {"x_y", "z"}}, []DescriptorEntry{{"a", "b_c"}, {"x_y", "z"}}},
	} {
		p, ok := s.MatchDescriptor("j", c.in)
		if !ok {
			t.Fatalf("%v: no policy", c.in)
		}
		if got := SeenEntries(p, c.in, nil); !slices.Equal(got, c.want) {
			t.Errorf("%v: seen as %v, want %v", c.in, got, c.want)
		}
	}
	if _, err := config.Parse("j.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\nlookup = \"joined\"\n")); err == nil {
		t.Error(`lookup = "joined" without compatibility accepted`)
	}
}

// TestJoinedStarInKey: under lookup = "joined" a '*' in a pattern's key
// (escaped, as import writes the reference's key "a*") is the
// reference's wildcard over KEY_VALUE, as its finalKey has it; under
// "distinct" it is a literal key. The literal KEY_VALUE is looked up
// first, as the reference's map has it.
func TestJoinedStarInKey(t *testing.T) {
	for _, lookup := range []string{"joined", "distinct"} {
		s := compileRLS(t, lookup, "", `descriptor = ["a\\*"]`)
		for _, c := range []struct {
			e             DescriptorEntry
			joined, apart bool
		}{
			{DescriptorEntry{"a*", "v"}, true, true},  // "a*_v" matches a*; apart, the key as written
			{DescriptorEntry{"ab", "x"}, true, false}, // "ab_x" matches a*
			{DescriptorEntry{"a", ""}, true, false},   // "a_" matches a*
			{DescriptorEntry{"b", "a"}, false, false}, // "b_a" does not
		} {
			_, ok := s.MatchDescriptor("j", []DescriptorEntry{c.e})
			want := c.apart
			if lookup == "joined" {
				want = c.joined
			}
			if ok != want {
				t.Errorf("lookup %s, %v: found %v, want %v", lookup, c.e, ok, want)
			}
		}
	}
}

// compileRLS compiles one RLS policy of domain "j", a fixed window of 1
// a minute, under [rls] lookup = lookup, with the policy's key line (""
// for none) and its match table's descriptor line.
func compileRLS(t *testing.T, lookup, key, descriptor string) *Set {
	t.Helper()
	cfg, err := config.Parse("j.toml", []byte(`[rls]
listen = "127.0.0.1:0"
compatibility = "envoyproxy/ratelimit"
lookup = "`+lookup+`"

[[policy]]
name = "p"
`+key+`
[policy.match]
rls_domain = "j"
`+descriptor+`
[[policy.limits]]
algorithm = "fixed_window"
limit = 1
window = "1m"
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(cfg, memstore.New(memstore.Options{}), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
