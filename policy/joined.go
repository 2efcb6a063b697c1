package policy

import (
	"strings"

	"github.com/limitproxy/limitproxy/policy/config"
)

// [rls] lookup = "joined": a domain's RLS policies read as
// envoyproxy/ratelimit's tree of descriptors (its src/config's
// rateLimitDescriptor), each policy's patterns one path from the root,
// and looked up as its GetLimit does.

// joinedNode is one descriptor of the tree: what a lookup that ends here
// finds, and the level below it.
type joinedNode struct {
	// p is the first policy, in file order, whose path ends here; nil
	// for a descriptor that only leads to others (no limit).
	p *Policy
	// byKey holds the level below by the reference's map key (Joined:
	// KEY_VALUE, or KEY for a bare key): the first descriptor of each.
	// A wildcard is there too, under its pattern, unless another
	// descriptor has that key: the literal copy limitproxy import writes
	// before it (the same subtree).
	byKey map[string]*joinedNode
	// wild are the level's wildcards in file order, each its KEY_VALUE
	// split at each '*'.
	wild []joinedWild
	// kids are the level's descriptors by pattern (String), as the paths
	// are built.
	kids map[string]*joinedNode
}

type joinedWild struct {
	parts []string
	n     *joinedNode
}

// joinedTrees builds a tree for each domain of rls (its policies in file
// order).
func joinedTrees(rls map[string][]*Policy) map[string]*joinedNode {
	trees := make(map[string]*joinedNode, len(rls))
	for d, ps := range rls {
		root := &joinedNode{}
		for _, p := range ps {
			n := root
			for _, pat := range p.Match.Descriptor {
				n = n.child(pat)
			}
			if n.p == nil && n != root {
				n.p = p
			}
		}
		trees[d] = root
	}
	return trees
}

// child is n's descriptor of pattern pat, made when new.
func (n *joinedNode) child(pat config.DescriptorPattern) *joinedNode {
	id := pat.String()
	if c, ok := n.kids[id]; ok {
		return c
	}
	if n.kids == nil {
		n.kids, n.byKey = map[string]*joinedNode{}, map[string]*joinedNode{}
	}
	c := &joinedNode{}
	n.kids[id] = c
	key, parts := pat.Joined()
	if parts != nil {
		n.wild = append(n.wild, joinedWild{parts: parts, n: c})
	}
	if _, ok := n.byKey[key]; !ok {
		n.byKey[key] = c
	}
	return c
}

// matchJoined is the reference's GetLimit in domain's tree: at each
// level the descriptor keyed by the entry's KEY_VALUE, else the first
// wildcard that matches KEY_VALUE, else the descriptor keyed by its bare
// KEY; the policy of the one found at the last entry, if any. The
// lookup ends without a policy where nothing is found, or where the
// descriptor found has nothing below it before the last entry.
func (s *Set) matchJoined(domain string, entries []DescriptorEntry) (*Policy, bool) {
	n := s.joined[domain]
	if n == nil || len(entries) == 0 {
		return nil, false
	}
	var stack [128]byte
	for i, e := range entries {
		b := append(append(append(stack[:0], e.Key...), '_'), e.Value...)
		next := n.byKey[string(b)]
		if next == nil && len(n.wild) > 0 {
			kv := string(b)
			for _, w := range n.wild {
				if config.JoinedMatch(w.parts, kv) {
					next = w.n
					break
				}
			}
		}
		if next == nil {
			if next = n.byKey[e.Key]; next == nil {
				return nil, false
			}
		}
		if i == len(entries)-1 {
			return next.p, next.p != nil
		}
		n = next
	}
	return nil, false
}

// SeenEntries returns entries as p's patterns see them, in buf: under
// [rls] lookup = "joined" an entry found by its KEY_VALUE through a
// descriptor of another key (key "a_b", value "c" through "a=b_c") is
// the pattern's key with what follows it and '_' in KEY_VALUE ("a",
// "b_c"), so that p's descriptor:KEY key parts read it; an entry of the
// pattern's key, and any entry under lookup = "distinct", is itself.
// entries is returned when none changes.
func SeenEntries(p *Policy, entries []DescriptorEntry, buf []DescriptorEntry) []DescriptorEntry {
	pats := p.Match.Descriptor
	if len(pats) != len(entries) {
		return entries
	}
	same := true
	for i, e := range entries {
		if e.Key != pats[i].Key {
			same = false
			break
		}
	}
	if same {
		return entries
	}
	out := buf[:0]
	for i, e := range entries {
		k := pats[i].Key
		if e.Key != k {
			kv := e.Key + "_" + e.Value
			v, ok := strings.CutPrefix(kv, k+"_")
			if !ok {
				v = "" // a bare key found by its KEY_VALUE: no value
			}
			e = DescriptorEntry{Key: k, Value: v}
		}
		out = append(out, e)
	}
	return out
}
