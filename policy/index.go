package policy

import (
	"bytes"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"
)

// index finds the first policy that matches a request without trying
// every policy in turn. Each policy is filed under one condition that
// every request it matches meets, the one that narrows it most:
//
//   - its exact path, or its path_prefix, in a radix tree of paths that a
//     request's path is walked down once, byte by byte;
//   - the literal a path_regex anchored at the start begins with
//     (`^/api/v[0-9]+/`: "/api/v"), in the same tree as a prefix;
//   - its hosts: exact ones in a map, "*.example.com" under
//     ".example.com", looked up for each dot of the request's host;
//   - the literal a path_regex anchored at the end ends with
//     (`\.json$`: ".json"), by suffix;
//   - none of these (a regex with neither literal, methods or headers
//     alone, a catch-all): always a candidate.
//
// A request's candidates are the policies filed under what it meets, plus
// those always tried; they are tried in file order with the whole match
// table, as Set.Match promises, so the first that matches is the one a
// linear scan finds (TestIndexAgreesWithScan). With a thousand policies
// told apart by path, host or an anchored regex, a match costs about what
// it does with one (BenchmarkMatch, BenchmarkScaling in proxy).
//
// An index is built once with its Set and never changes.
type index struct {
	paths  pathTree
	hosts  map[string][]int // exact host, or ".suffix" of a wildcard → policies
	wild   bool             // hosts holds a wildcard's suffix
	suffix suffixes         // literal suffix of an end-anchored regex → policies
	always []int            // every other policy but RLS ones
}

// newIndex indexes ps; with fold, for MatchFold: every path, prefix and
// literal in lower case, to be walked with a path in lower case.
func newIndex(ps []*Policy, fold bool) *index {
	x := &index{}
	lower := func(s string) string { return s }
	if fold {
		lower = strings.ToLower
	}
	for i, p := range ps {
		m := &p.Match
		switch {
		case m.RLS():
			// Never an HTTP request's: not a candidate.
		case m.All:
			x.always = append(x.always, i)
		case m.HasPath:
			x.paths.insert(lower(m.Path), i, true)
		case m.PathPrefix != "":
			x.paths.insert(lower(m.PathPrefix), i, false)
		case m.PathRegex != nil && regexPrefix(m.PathRegex.String()) != "":
			x.paths.insert(lower(regexPrefix(m.PathRegex.String())), i, false)
		case len(m.Hosts) > 0 && !slices.ContainsFunc(m.Hosts, unindexedHost):
			if x.hosts == nil {
				x.hosts = map[string][]int{}
			}
			for _, h := range m.Hosts {
				if suffix, ok := strings.CutPrefix(h, "*"); ok {
					h, x.wild = suffix, true // "*.example.com" → ".example.com"
				}
				if l := x.hosts[h]; len(l) == 0 || l[len(l)-1] != i {
					x.hosts[h] = append(l, i)
				}
			}
		case m.PathRegex != nil && regexSuffix(m.PathRegex.String()) != "":
			x.suffix.add(lower(regexSuffix(m.PathRegex.String())), i)
		default:
			x.always = append(x.always, i)
		}
	}
	return x
}

// unindexedHost reports whether a hosts entry cannot be looked up: a
// wildcard other than "*.NAME" (which validation refuses).
func unindexedHost(h string) bool {
	return strings.HasPrefix(h, "*") && (!strings.HasPrefix(h, "*.") || len(h) < 3)
}

// candidates appends to buf the indexes of the policies that may match a
// request whose path is path and whose host is host (requestHost), in
// ascending order and without repeats.
func (x *index) candidates(path, host string, buf []int) []int {
	buf = x.paths.walk(path, buf)
	if x.hosts != nil {
		buf = append(buf, x.hosts[host]...)
		// "*.example.com" matches a host that ends in ".example.com"
		// after at least one byte: every suffix of host that begins at
		// a dot past its first byte.
		for i := 1; x.wild && i < len(host); i++ {
			if host[i] == '.' {
				buf = append(buf, x.hosts[host[i:]]...)
			}
		}
	}
	buf = x.suffix.lookup(path, buf)
	buf = append(buf, x.always...)
	if len(buf) > 1 {
		slices.Sort(buf)
		buf = slices.Compact(buf)
	}
	return buf
}

// pathTree is a radix tree of exact paths and path prefixes: each node is
// the string of the edges from the root to it, with the policies filed
// under that string as an exact path (exact) or as a prefix (prefix).
type pathTree struct{ root pathNode }

type pathNode struct {
	label    string // the edge from the parent; "" only for the root
	exact    []int  // policies whose path is this node's string
	prefix   []int  // policies whose path prefix is this node's string
	first    []byte // children's first label bytes, ascending
	children []*pathNode
}

func (t *pathTree) insert(s string, i int, exact bool) {
	n := &t.root
	for s != "" {
		j, ok := slices.BinarySearch(n.first, s[0])
		if !ok {
			c := &pathNode{label: s}
			n.first = slices.Insert(n.first, j, s[0])
			n.children = slices.Insert(n.children, j, c)
			n = c
			break
		}
		c := n.children[j]
		k := commonPrefix(c.label, s)
		if k < len(c.label) {
			// Split c at k: a new node for the common part, c below it.
			mid := &pathNode{label: c.label[:k], first: []byte{c.label[k]}, children: []*pathNode{c}}
			c.label = c.label[k:]
			n.children[j] = mid
			c = mid
		}
		n, s = c, s[k:]
	}
	if exact {
		n.exact = append(n.exact, i)
	} else {
		n.prefix = append(n.prefix, i)
	}
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// walk appends the policies filed under a prefix of path, and under path
// exactly.
func (t *pathTree) walk(path string, buf []int) []int {
	n := &t.root
	rest := path
	for {
		buf = append(buf, n.prefix...)
		if rest == "" {
			return append(buf, n.exact...)
		}
		c := n.child(rest[0])
		// c's label begins with rest[0]: compare the rest of it.
		if c == nil || len(rest) < len(c.label) || rest[1:len(c.label)] != c.label[1:] {
			return buf
		}
		n, rest = c, rest[len(c.label):]
	}
}

// child returns the child whose label begins with b, nil if none.
func (n *pathNode) child(b byte) *pathNode {
	if len(n.first) > 16 {
		if j := bytes.IndexByte(n.first, b); j >= 0 {
			return n.children[j]
		}
		return nil
	}
	for j, f := range n.first {
		if f == b {
			return n.children[j]
		}
	}
	return nil
}

// suffixes files policies by a literal suffix of the path: a map per
// suffix, and the suffixes' distinct lengths, so that a path's suffixes
// are looked up once per length (a few, however many policies), and only
// when the path ends with a byte some suffix ends with.
type suffixes struct {
	bySuffix map[string][]int
	lengths  []int     // ascending
	last     [4]uint64 // the suffixes' last bytes, a bit each
}

func (s *suffixes) add(suffix string, i int) {
	if s.bySuffix == nil {
		s.bySuffix = map[string][]int{}
	}
	if j, ok := slices.BinarySearch(s.lengths, len(suffix)); !ok {
		s.lengths = slices.Insert(s.lengths, j, len(suffix))
	}
	s.bySuffix[suffix] = append(s.bySuffix[suffix], i)
	c := suffix[len(suffix)-1]
	s.last[c/64] |= 1 << (c % 64)
}

func (s *suffixes) lookup(path string, buf []int) []int {
	if path == "" {
		return buf
	}
	if c := path[len(path)-1]; s.last[c/64]&(1<<(c%64)) == 0 {
		return buf
	}
	for _, l := range s.lengths {
		if l > len(path) {
			break
		}
		buf = append(buf, s.bySuffix[path[len(path)-l:]]...)
	}
	return buf
}

// regexPrefix returns the literal every string expr matches begins with,
// when expr is anchored at the start of the text and then begins with a
// literal (`^/api/v[0-9]+`: "/api/v"); "" otherwise.
func regexPrefix(expr string) string {
	subs := concat(expr)
	if len(subs) < 2 || subs[0].Op != syntax.OpBeginText {
		return ""
	}
	return literal(subs[1])
}

// regexSuffix returns the literal every string expr matches ends with,
// when expr ends with a literal anchored at the end of the text
// (`/[a-z]+\.json$`: ".json"); "" otherwise.
func regexSuffix(expr string) string {
	subs := concat(expr)
	if len(subs) < 2 || subs[len(subs)-1].Op != syntax.OpEndText {
		return ""
	}
	return literal(subs[len(subs)-2])
}

// concat parses expr as package regexp does, and returns the parts of
// its top-level concatenation (nil when it is something else).
func concat(expr string) []*syntax.Regexp {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil || re.Op != syntax.OpConcat {
		return nil
	}
	return re.Sub
}

// literal returns the text of a case-sensitive literal, "" for anything
// else. A literal holding U+FFFD is refused: the regexp engine reads each
// invalid byte of a path as that rune, so no byte comparison can stand
// for it.
func literal(re *syntax.Regexp) string {
	if re.Op != syntax.OpLiteral || re.Flags&syntax.FoldCase != 0 || slices.Contains(re.Rune, utf8.RuneError) {
		return ""
	}
	return string(re.Rune)
}
