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
	return refWalk(d, es, func(nodes []*Node, e entry) *Node {
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
					return n
				}
			}
			for _, n := range nodes {
				if n.Value == "" && n.Key == e.key {
					next = n
				}
			}
		}
		return next
	})
}

// refWalk walks d's tree as the reference's GetLimit does, find naming
// each entry's descriptor in its level (nil for none): a limit counts
// only at the last entry, and the walk ends where nothing is found or
// the descriptor found has no level below.
func refWalk(d *Domain, es []entry, find func(nodes []*Node, e entry) *Node) *Limit {
	nodes := d.Nodes
	var found *Limit
	for i, e := range es {
		next := find(nodes, e)
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
	return randomNodes(r, depth, id, 4, []string{"a", "b"},
		[]string{"", "x", "y", "xy", "x*", "*", "xy*", "y*", "*y", "x*y", "*x*", "y*x", "x*x", "y*y"})
}

// randomNodes is a random level of up to width-1 descriptors of keys and
// values (none twice by KEY_VALUE: the reference's load error), each with
// a limit (unlimited now and then) two times in three and, above depth
// 1, a level below half the time; id numbers them, as their lines.
func randomNodes(r *rand.Rand, depth int, id *int, width int, keys, values []string) []*Node {
	var out []*Node
	seen := map[string]bool{}
	for range r.IntN(width) {
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
			n.Children = randomNodes(r, depth-1, id, width, keys, values)
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

// refJoinedLookup is refLookup as the reference's map is keyed: by each
// descriptor's KEY_VALUE (KEY for a bare key), which an entry's
// KEY_VALUE finds first, whatever the descriptor's key, and its bare KEY
// last (which a descriptor's KEY_VALUE may equal too); the wildcards
// match the entry's KEY_VALUE in file order between the two.
func refJoinedLookup(d *Domain, es []entry) *Limit {
	return refWalk(d, es, func(nodes []*Node, e entry) *Node {
		var next *Node
		full := e.key + "_" + e.value
		for _, n := range nodes {
			if n.FinalKey() == full {
				next = n
			}
		}
		if next == nil {
			for _, n := range nodes {
				if strings.Contains(n.FinalKey(), "*") && wildcardMatch(strings.Split(n.FinalKey(), "*"), full) {
					return n
				}
			}
			for _, n := range nodes {
				if n.FinalKey() == e.key {
					next = n
				}
			}
		}
		return next
	})
}

// randomJoinedTree is randomTree of keys and values that meet through
// the join: key "a" with value "b_c" and key "a_b" with value "c" (both
// "a_b_c"), bare keys equal to another's KEY_VALUE ("a_b"), wildcards
// of one key that match another's KEY_VALUE ("a=b*" matches key "a_b").
// Two descriptors of one KEY_VALUE at a level are the reference's load
// error: one is left out.
func randomJoinedTree(r *rand.Rand, depth int, id *int) []*Node {
	return randomNodes(r, depth, id, 6, []string{"a", "a_b", "b", "a_b_c", "b_c", "a*", "*_c", "a*b"},
		[]string{"", "b", "c", "b_c", "c_x", "x", "b*", "*", "*c", "b_*", "c*", "*_c", "b*c", "*b*"})
}

// TestJoinedLookupDecidesAsTheReference compares, over random trees whose
// keys and values meet through '_' and random descriptors of such keys
// and values, the limit the reference's lookup finds with the policy
// limitproxy finds in the import written with -joined-keys ([rls]
// lookup = "joined"), parsed and compiled: its MatchDescriptor.
func TestJoinedLookupDecidesAsTheReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	keys := []string{"a", "a_b", "b", "a_b_c", "b_c", "c", "a*", "ab", "x_c", "a*b"}
	values := []string{"", "b", "c", "b_c", "c_x", "x", "b*", "*", "b_c_x", "c_b", "_", "b_"}
	o := Options{JoinedKeys: true}
	differs := 0
	for tree := range 1500 {
		id := 0
		d := &Domain{File: "t.yaml", Name: "d", Nodes: randomJoinedTree(r, 3, &id)}
		c := &converter{o: o, file: d.File, names: map[string]int{}}
		ps := c.domain(d)
		if len(c.errs) > 0 {
			t.Fatalf("tree %d: %v", tree, c.errs)
		}
		if len(ps) == 0 {
			continue
		}
		toml := render([]Input{{Name: d.File}}, []*Domain{d}, [][]*policy{ps}, nil, o, c.depth)
		cfg, err := config.Parse("t.toml", toml)
		if err != nil {
			t.Fatalf("tree %d: %v\n%s", tree, err, toml)
		}
		if cfg.RLS.Lookup != config.LookupJoined {
			t.Fatalf("tree %d: lookup %q", tree, cfg.RLS.Lookup)
		}
		set, err := lpolicy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*Limit{}
		for _, p := range ps {
			byName[p.name] = p.from
		}
		for range 60 {
			es := make([]entry, 1+r.IntN(3))
			for i := range es {
				es[i] = entry{keys[r.IntN(len(keys))], values[r.IntN(len(values))]}
			}
			want := refJoinedLookup(d, es)
			if want != refLookup(d, es) {
				differs++
			}
			var des []lpolicy.DescriptorEntry
			for _, e := range es {
				des = append(des, lpolicy.DescriptorEntry{Key: e.key, Value: e.value})
			}
			var got *Limit
			if q, ok := set.MatchDescriptor("d", des); ok {
				got = byName[q.Name]
			}
			if got != want {
				t.Fatalf("tree %d, descriptor %v: the reference finds %s, limitproxy's MatchDescriptor %s\n%s\n%s",
					tree, es, limitString(want), limitString(got), dumpTree(d.Nodes, ""), toml)
			}
		}
	}
	// The descriptors must reach what only the join finds.
	if differs < 300 {
		t.Errorf("%d descriptors found another limit by KEY_VALUE than keys and values apart: too few to tell", differs)
	}
	t.Logf("%d descriptors found another limit by KEY_VALUE than keys and values apart", differs)
}

// TestStarKeyWarning: import warns of a key with '*' (matched as written
// by default, where the reference takes it as a wildcard), and not with
// -joined-keys, whose lookup takes it as the reference does.
func TestStarKeyWarning(t *testing.T) {
	src := []byte("domain: d\ndescriptors:\n  - key: \"a*\"\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	for _, joined := range []bool{false, true} {
		res, err := Import([]Input{{Name: "d.yaml", Src: src}}, Options{JoinedKeys: joined})
		if err != nil {
			t.Fatal(err)
		}
		warned := false
		for _, w := range res.Warnings {
			warned = warned || strings.Contains(w.Msg, `key "a*" is matched as written`)
		}
		if warned == joined {
			t.Errorf("-joined-keys %v: warned %v (%v)", joined, warned, res.Warnings)
		}
	}
}
