package envoyimport

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	lpolicy "github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

type entry struct{ key, value string }

// refLookup is envoyproxy/ratelimit's GetLimit, restated over the parsed
// tree: at each level the entry's "key_value", then the wildcards (a '*'
// anywhere in the value) in file order, then the bare key; a limit
// counts only at the last entry; the lookup never goes back up. It
// returns the rate_limit that applies (an unlimited one too), nil for
// none.
func refLookup(d *Domain, es []entry) *Limit {
	nodes := d.Nodes
	var found *Limit
	for i, e := range es {
		var next *Node
		full := e.key + "_" + e.value
		for _, n := range nodes {
			if n.Value != "" && n.FinalKey() == full {
				next = n
			}
		}
		if next == nil {
			for _, n := range nodes {
				if strings.Contains(n.Value, "*") && wildcardMatch(strings.Split(n.FinalKey(), "*"), full) {
					next = n
					break
				}
			}
		}
		if next == nil {
			for _, n := range nodes {
				if n.Value == "" && n.Key == e.key {
					next = n
				}
			}
		}
		if next != nil && next.Limit != nil && i == len(es)-1 {
			found = next.Limit
		}
		if next == nil || len(next.Children) == 0 {
			break
		}
		nodes = next.Children
	}
	return found
}

// wildcardMatch is the reference's: value matches parts, a pattern split
// at each '*', each '*' any run of characters (restated from its
// src/config/config_impl.go).
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if !strings.HasPrefix(value, parts[0]) || !strings.HasSuffix(value, parts[len(parts)-1]) || len(value) < total {
		return false
	}
	rest := value[len(parts[0]) : len(value)-len(parts[len(parts)-1])]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// flatLookup is the RLS face's choice as docs/envoy.md states it: the
// first policy of the domain whose descriptor has the call's length and
// whose patterns match entry by entry ("KEY", "KEY=VALUE",
// "KEY=PATTERN" with '*' anywhere).
func flatLookup(ps []*policy, domain string, es []entry) *policy {
	for _, p := range ps {
		if p.domain != domain || len(p.descriptor) != len(es) {
			continue
		}
		ok := true
		for i, pat := range p.descriptor {
			k, parts, hasV := splitPattern(pat)
			switch {
			case k != es[i].key:
				ok = false
			case !hasV || len(parts) > 1 && strings.Join(parts, "") == "":
			case len(parts) > 1:
				ok = wildcardMatch(parts, es[i].value)
			default:
				ok = parts[0] == es[i].value
			}
			if !ok {
				break
			}
		}
		if ok {
			return p
		}
	}
	return nil
}

func randomTree(r *rand.Rand, depth int, id *int) []*Node {
	keys := []string{"a", "b"}
	values := []string{"", "x", "y", "xy", "x*", "*", "xy*", "y*", "*y", "x*y", "*x*", "y*x", "x*x", "y*y"}
	var out []*Node
	seen := map[string]bool{}
	for range r.IntN(4) {
		n := &Node{Key: keys[r.IntN(len(keys))], Value: values[r.IntN(len(values))]}
		if seen[n.FinalKey()] {
			continue
		}
		seen[n.FinalKey()] = true
		*id++
		n.Line = *id
		if r.IntN(3) > 0 {
			n.Limit = &Limit{RequestsPerUnit: uint32(*id), Unit: "minute", Unlimited: r.IntN(8) == 0}
		}
		if depth > 1 && r.IntN(2) == 0 {
			n.Children = randomTree(r, depth-1, id)
		}
		out = append(out, n)
	}
	return out
}

// TestFlattenDecidesAsTheReference compares, over random trees and random
// descriptors, the limit the reference's lookup finds with the limit of
// the first matching policy of the import.
// splitPattern is a pattern as docs/configuration.md states it: the key
// up to the first '=' not escaped, the value split at each '*' not
// escaped; '\\' makes the '\\', '*' or '=' after it literal.
func splitPattern(pat string) (key string, parts []string, hasValue bool) {
	var cur strings.Builder
	for i := 0; i < len(pat); i++ {
		c := pat[i]
		switch {
		case c == '\\' && i+1 < len(pat) && strings.IndexByte(`\*=`, pat[i+1]) >= 0:
			i++
			cur.WriteByte(pat[i])
		case c == '=' && !hasValue:
			key, hasValue = cur.String(), true
			cur.Reset()
		case c == '*' && hasValue:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	if !hasValue {
		return cur.String(), nil, false
	}
	return key, append(parts, cur.String()), true
}

func TestFlattenDecidesAsTheReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c"}
	// Values with '*' too: the reference looks such a value up literally
	// first, which the import's literal copies of the wildcards do.
	values := []string{"", "x", "y", "xy", "xyz", "z", "yx", "xyx", "yxy", "xxy", "x*", "*", "x*y", "*y", "y*x", "*x*"}
	for tree := range 3000 {
		id := 0
		d := &Domain{File: "t.yaml", Name: "d", Nodes: randomTree(r, 3, &id)}
		c := &converter{file: d.File, names: map[string]int{}}
		ps := c.domain(d)
		if len(c.errs) > 0 {
			t.Fatalf("tree %d: %v", tree, c.errs)
		}
		// Every tenth tree also through the real pipeline: the TOML, as
		// limitproxy parses and compiles it, and its MatchDescriptor.
		var set *lpolicy.Set
		byName := map[string]*Limit{}
		if tree%10 == 0 && len(ps) > 0 {
			toml := render([]Input{{Name: d.File}}, []*Domain{d}, [][]*policy{ps}, nil, Options{}, c.depth)
			cfg, err := config.Parse("t.toml", toml)
			if err != nil {
				t.Fatalf("tree %d: %v\n%s", tree, err, toml)
			}
			if set, err = lpolicy.Compile(cfg, memstore.New(memstore.Options{}), time.Now()); err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				byName[p.name] = p.from
			}
		}
		for range 60 {
			es := make([]entry, 1+r.IntN(4))
			for i := range es {
				es[i] = entry{keys[r.IntN(len(keys))], values[r.IntN(len(values))]}
			}
			want := refLookup(d, es)
			p := flatLookup(ps, "d", es)
			var got *Limit
			if p != nil {
				got = p.from
			}
			if got != want {
				t.Fatalf("tree %d, descriptor %v: the reference finds %s, the import %s (policy %v)\n%s",
					tree, es, limitString(want), limitString(got), p, dumpTree(d.Nodes, ""))
			}
			if set == nil {
				continue
			}
			var des []lpolicy.DescriptorEntry
			for _, e := range es {
				des = append(des, lpolicy.DescriptorEntry{Key: e.key, Value: e.value})
			}
			got = nil
			if q, ok := set.MatchDescriptor("d", des); ok {
				got = byName[q.Name]
			}
			if got != want {
				t.Fatalf("tree %d, descriptor %v: the reference finds %s, limitproxy's MatchDescriptor %s\n%s",
					tree, es, limitString(want), limitString(got), dumpTree(d.Nodes, ""))
			}
		}
	}
}

// TestGlobsMeet compares globsMeet with the values that match both
// patterns, over every pattern of 'a', 'b' and '*' up to four long and
// every value of 'a' and 'b' up to eight (a value of both, if any, is
// no longer than the two patterns' letters).
func TestGlobsMeet(t *testing.T) {
	var pats, vals []string
	var gen func(prefix string, n int, alphabet string, out *[]string)
	gen = func(prefix string, n int, alphabet string, out *[]string) {
		*out = append(*out, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(prefix+string(c), n-1, alphabet, out)
		}
	}
	gen("", 4, "ab*", &pats)
	gen("", 8, "ab", &vals)
	match := func(p, v string) bool { return wildcardMatch(strings.Split(p, "*"), v) }
	meets := 0
	for _, a := range pats {
		for _, b := range pats {
			want := false
			for _, v := range vals {
				if match(a, v) && match(b, v) {
					want = true
					break
				}
			}
			if got := globsMeet(a, b); got != want {
				t.Fatalf("globsMeet(%q, %q) = %v, want %v", a, b, got, want)
			}
			if want {
				meets++
			}
		}
		for _, v := range vals[:40] {
			if got, want := globMatch(a, v), match(a, v); got != want {
				t.Fatalf("globMatch(%q, %q) = %v, want %v", a, v, got, want)
			}
		}
	}
	if meets == 0 || meets == len(pats)*len(pats) {
		t.Fatalf("%d of %d pairs meet: the comparison tells nothing", meets, len(pats)*len(pats))
	}
	if globMatch("a*", "a*") != true || globMatch("a*b", "a*") != false {
		t.Error("a value's own '*' is a character")
	}
}

func limitString(l *Limit) string {
	if l == nil {
		return "no limit"
	}
	return fmt.Sprintf("the limit of line %d", l.RequestsPerUnit)
}

func dumpTree(ns []*Node, indent string) string {
	var b strings.Builder
	for _, n := range ns {
		fmt.Fprintf(&b, "%s%s (line %d) limit=%v\n", indent, n.FinalKey(), n.Line, n.Limit != nil)
		b.WriteString(dumpTree(n.Children, indent+"  "))
	}
	return b.String()
}
