package envoyimport

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

type entry struct{ key, value string }

// refLookup is envoyproxy/ratelimit's GetLimit, restated over the parsed
// tree: at each level the entry's "key_value", then the wildcards in file
// order, then the bare key; a limit counts only at the last entry; the
// lookup never goes back up. It returns the limit that applies, nil for
// none (unlimited is none too: it is never over).
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
				if strings.HasSuffix(n.Value, "*") && strings.HasPrefix(full, strings.TrimSuffix(n.FinalKey(), "*")) {
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
		if next != nil && next.Limit != nil && i == len(es)-1 && !next.Limit.Unlimited {
			found = next.Limit
		}
		if next == nil || len(next.Children) == 0 {
			break
		}
		nodes = next.Children
	}
	return found
}

// flatLookup is the RLS face's choice as docs/envoy.md states it: the
// first policy of the domain whose descriptor has the call's length and
// whose patterns match entry by entry ("KEY", "KEY=VALUE",
// "KEY=PREFIX*").
func flatLookup(ps []*policy, domain string, es []entry) *policy {
	for _, p := range ps {
		if p.domain != domain || len(p.descriptor) != len(es) {
			continue
		}
		ok := true
		for i, pat := range p.descriptor {
			k, v, hasV := strings.Cut(pat, "=")
			switch {
			case k != es[i].key:
				ok = false
			case !hasV || v == "*":
			case strings.HasSuffix(v, "*"):
				ok = strings.HasPrefix(es[i].value, strings.TrimSuffix(v, "*"))
			default:
				ok = v == es[i].value
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
	values := []string{"", "x", "y", "xy", "x*", "*", "xy*", "y*"}
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
func TestFlattenDecidesAsTheReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c"}
	// No value ends in "*": the reference looks such a value up literally
	// first (docs/envoy.md, known differences).
	values := []string{"", "x", "y", "xy", "xyz", "z", "yx"}
	for tree := range 3000 {
		id := 0
		d := &Domain{File: "t.yaml", Name: "d", Nodes: randomTree(r, 3, &id)}
		c := &converter{file: d.File, names: map[string]int{}}
		ps := c.domain(d)
		if len(c.errs) > 0 {
			t.Fatalf("tree %d: %v", tree, c.errs)
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
				got = p.limit
			}
			if got != want {
				t.Fatalf("tree %d, descriptor %v: the reference finds %s, the import %s (policy %v)\n%s",
					tree, es, limitString(want), limitString(got), p, dumpTree(d.Nodes, ""))
			}
		}
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
