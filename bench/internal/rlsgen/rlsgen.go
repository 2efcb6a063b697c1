// Package rlsgen generates envoyproxy/ratelimit configurations and
// sequences of rate limit calls for the differential test against the
// reference (bench/rlsdiff): trees of descriptors with every feature of
// its configuration (values, wildcards, bare keys, descriptors without a
// limit, unlimited, requests_per_unit 0, every unit, names and replaces,
// shadow_mode, quota_mode, share_threshold, detailed_metric,
// value_to_metric, metadata, requests_per_unit up to 4294967295, domains
// merged from two files), and calls of one to three descriptors, most
// following the tree's paths, with hits_addend (the call's and the
// descriptor's, 0 and large, up to 10⁹), a descriptor's own limit,
// unknown domains, bad calls (an empty domain, no descriptors) that the
// reference answers with an error, descriptors that alias another's
// count when joined with '_' as the reference names its counts (one
// entry's value holding the next entry's key and value: limitproxy
// serves them with [rls] count_keys = "joined"), keys and values that
// meet through the reference's lookup by KEY_VALUE (key "a" with value
// "x_y" and key "a_x" with value "y", a bare key "a_x" and "a" with
// value "x", a wildcard of key "a" matching keys "a_…": limitproxy
// serves them with [rls] lookup = "joined"), with calls that find them
// (an entry split anew at another '_' of its KEY_VALUE, or its KEY_VALUE
// made a key), and, in some cases, a wait for the next second between
// two calls (a second's windows end).
//
// What the reference and limitproxy are documented to do otherwise
// (docs/envoy.md, "What differs") is left out: a call's value holds '*'
// only as a wildcard's value as written; the files of a merged domain
// split it by key, keys that meet through '_' in one file.
package rlsgen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Features are what the reference built supports beyond its pinned
// version (rlsref.Features).
type Features struct {
	Wildcards   bool // '*' anywhere in a value
	QuotaStatus bool // quota_mode as its current version has it
	Metadata    bool // a descriptor's metadata
}

// Case is one generated configuration and its calls.
type Case struct {
	Domain string
	// Files are its YAML files by name: one, or two of one domain (to be
	// merged, MERGE_DOMAIN_CONFIG).
	Files map[string][]byte
	Merge bool
	Calls []*rlsv3.RateLimitRequest
	// Joined counts the calls' descriptors that the reference's lookup
	// by KEY_VALUE finds another descriptor for than a lookup of keys
	// and values apart would.
	Joined int
	// Waits are the calls before which the next second of the clock is
	// awaited, once for each time a call is named (in order): a second's
	// windows end between them.
	Waits []int
	// AtMinute starts the calls at a minute's first second, where every
	// unit's window but the second's may start with a second's.
	AtMinute bool
}

// Unit is a unit of the reference: its name in YAML, its number in the
// answer, its window.
type Unit struct {
	Name   string
	Number rlsv3.RateLimitResponse_RateLimit_Unit
	Window time.Duration
}

// Units are the reference's units.
var Units = []Unit{
	{"second", rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{"minute", rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{"hour", rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{"day", rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{"week", rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{"month", rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{"year", rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// node is one generated descriptor.
type node struct {
	key, value string
	limit      *limit
	shadow     bool
	quota      bool
	share      bool
	detailed   bool
	toMetric   bool
	metadata   bool
	children   []*node
}

type limit struct {
	rpu       uint32
	unit      Unit
	unlimited bool
	name      string
	replaces  []string
}

func (n *node) finalKey() string {
	if n.value == "" {
		return n.key
	}
	return n.key + "_" + n.value
}

// gen holds one case's generation.
type gen struct {
	r     *rand.Rand
	f     Features
	names []string
	// sent are the descriptors of more than one entry the calls have
	// sent, whose joins another descriptor may alias.
	sent [][]*rlscommon.RateLimitDescriptor_Entry
}

var (
	keys   = []string{"a", "b", "c", "c=x"} // a key may hold '=' (the import escapes it)
	values = []string{"x", "y", "z", "xy", "yx", "xyz"}
	// joinedKeys and joinedValues meet keys and values through '_':
	// "a_x_y" is a=x_y, a_x=y and the bare key a_x_y.
	joinedKeys   = []string{"a_x", "a_x_y", "b_y", "a_xy"}
	joinedValues = []string{"x_y", "y_z", "x_y_z", "y_x"}
	joinedWilds  = []string{"x_*", "*_y", "x*"}
)

// family is what a key's KEY_VALUE starts with up to its first '_': two
// keys' descriptors meet through the join only within one.
func family(key string) string {
	f, _, _ := strings.Cut(key, "_")
	return f
}

// Generate returns the case of seed, whose domain is domain.
func Generate(seed uint64, domain string, f Features) *Case {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), f: f, names: []string{"n1", "n2", "n3"}}
	tree := g.level(1)
	c := &Case{Domain: domain, Files: map[string][]byte{}}
	if g.r.IntN(6) == 0 && len(tree) > 1 {
		// Two files of the domain, split by key: the reference merges
		// them in an order it does not fix, which matters only when two
		// files' wildcards meet.
		var a, b []*node
		splitKey := family(tree[0].key)
		for _, n := range tree {
			if family(n.key) == splitKey {
				a = append(a, n)
			} else {
				b = append(b, n)
			}
		}
		if len(b) > 0 {
			c.Merge = true
			c.Files[domain+"-1.yaml"] = render(domain, a)
			c.Files[domain+"-2.yaml"] = render(domain, b)
		}
	}
	if !c.Merge {
		c.Files[domain+".yaml"] = render(domain, tree)
	}
	ownUnit := Units[g.r.IntN(len(Units))]
	for range 15 + g.r.IntN(25) {
		c.Calls = append(c.Calls, g.call(domain, tree, ownUnit))
	}
	for _, call := range c.Calls {
		for _, d := range call.Descriptors {
			joined, _ := find(tree, d.Entries, true)
			apart, _ := find(tree, d.Entries, false)
			if joined != apart {
				c.Joined++
			}
		}
	}
	if g.r.IntN(12) == 0 {
		c.Waits = []int{1 + g.r.IntN(len(c.Calls)-1)}
	}
	return c
}

// level generates the descriptors of one level at depth.
func (g *gen) level(depth int) []*node {
	var out []*node
	seen := map[string]bool{}
	for range 1 + g.r.IntN(4) {
		n := &node{key: keys[g.r.IntN(len(keys))]}
		if g.r.IntN(4) == 0 {
			n.key = joinedKeys[g.r.IntN(len(joinedKeys))]
		}
		switch p := g.r.IntN(20); {
		case p < 8: // a bare key
		case p < 11:
			n.value = values[g.r.IntN(len(values))]
		case p < 14:
			n.value = joinedValues[g.r.IntN(len(joinedValues))]
		case p < 16:
			n.value = joinedWilds[g.r.IntN(len(joinedWilds))]
			if !g.f.Wildcards && !strings.HasSuffix(n.value, "*") {
				n.value = "x_*" // its pinned version's wildcards end in '*'
			}
		default:
			n.value = g.wildcard()
		}
		if seen[n.finalKey()] {
			continue
		}
		seen[n.finalKey()] = true
		if g.r.IntN(10) < 7 {
			n.limit = g.limit()
		}
		n.shadow = g.r.IntN(10) == 0
		n.quota = g.f.QuotaStatus && g.r.IntN(8) == 0
		n.share = strings.Contains(n.value, "*") && g.r.IntN(3) == 0
		n.detailed = g.r.IntN(10) == 0
		n.toMetric = g.r.IntN(6) == 0
		n.metadata = g.f.Metadata && g.r.IntN(4) == 0
		if depth < 3 && g.r.IntN(5) < 2 {
			n.children = g.level(depth + 1)
		}
		out = append(out, n)
	}
	return out
}

// wildcard is a value with '*': trailing, or (Features.Wildcards)
// anywhere.
func (g *gen) wildcard() string {
	trailing := []string{"x*", "y*", "*", "xy*"}
	anywhere := []string{"*y", "x*y", "*x*", "x*z", "y*x"}
	if g.f.Wildcards && g.r.IntN(2) == 0 {
		return anywhere[g.r.IntN(len(anywhere))]
	}
	return trailing[g.r.IntN(len(trailing))]
}

func (g *gen) limit() *limit {
	l := &limit{unit: Units[g.r.IntN(len(Units))]}
	switch p := g.r.IntN(20); {
	case p == 0:
		l.unlimited = true
	case p == 1:
		l.rpu = 0
	case p == 2:
		l.rpu = 1000
	case p == 3:
		// The reference's largest, and one past 10⁹ hits of the calls.
		l.rpu = []uint32{4294967295, 2_000_000_001}[g.r.IntN(2)]
	default:
		l.rpu = uint32(1 + g.r.IntN(5))
	}
	if g.r.IntN(3) == 0 {
		l.name = g.names[g.r.IntN(len(g.names))]
	}
	if g.r.IntN(6) == 0 {
		r := g.names[g.r.IntN(len(g.names))]
		if r != l.name {
			l.replaces = []string{r}
		}
	}
	return l
}

// render writes domain's YAML.
func render(domain string, tree []*node) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", domain)
	renderLevel(&b, tree, "")
	return []byte(b.String())
}

func renderLevel(b *strings.Builder, ns []*node, indent string) {
	for _, n := range ns {
		fmt.Fprintf(b, "%s  - key: %q\n", indent, n.key)
		in := indent + "    "
		if n.value != "" {
			fmt.Fprintf(b, "%svalue: %q\n", in, n.value)
		}
		if l := n.limit; l != nil {
			fmt.Fprintf(b, "%srate_limit:\n", in)
			if l.unlimited {
				fmt.Fprintf(b, "%s  unlimited: true\n", in)
			} else {
				fmt.Fprintf(b, "%s  unit: %s\n%s  requests_per_unit: %d\n", in, l.unit.Name, in, l.rpu)
			}
			if l.name != "" {
				fmt.Fprintf(b, "%s  name: %s\n", in, l.name)
			}
			for _, r := range l.replaces {
				fmt.Fprintf(b, "%s  replaces:\n%s    - name: %s\n", in, in, r)
			}
		}
		for _, f := range []struct {
			name string
			on   bool
		}{{"shadow_mode", n.shadow}, {"quota_mode", n.quota}, {"share_threshold", n.share}, {"detailed_metric", n.detailed}, {"value_to_metric", n.toMetric}} {
			if f.on {
				fmt.Fprintf(b, "%s%s: true\n", in, f.name)
			}
		}
		if n.metadata {
			// Scalars only: the reference merges tables of two
			// descriptors' metadata into its configuration's own
			// (mergeMetadata keeps the first's table and adds to it),
			// which later answers carry.
			fmt.Fprintf(b, "%smetadata:\n%s  service: %s\n%s  %s: %d\n", in, in, n.key, in, n.key+"_level", len(in))
		}
		if len(n.children) > 0 {
			fmt.Fprintf(b, "%sdescriptors:\n", in)
			renderLevel(b, n.children, in)
		}
	}
}

// call generates one call of domain.
func (g *gen) call(domain string, tree []*node, ownUnit Unit) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	if g.r.IntN(20) == 0 {
		req.Domain = "unknown-" + domain
	}
	if g.r.IntN(4) == 0 {
		req.HitsAddend = uint32(1 + g.r.IntN(3))
	}
	n := 1 + g.r.IntN(3)
	switch g.r.IntN(40) {
	case 0:
		// Bad input: the reference's error (UNKNOWN), the whole call.
		req.Domain = ""
	case 1:
		n = 0
	}
	for range n {
		d := &rlscommon.RateLimitDescriptor{}
		if len(g.sent) > 0 && g.r.IntN(8) == 0 {
			d.Entries = g.alias(g.sent[g.r.IntN(len(g.sent))])
		} else if g.r.IntN(10) < 7 {
			d.Entries = g.path(tree)
			if len(d.Entries) > 1 {
				g.sent = append(g.sent, d.Entries)
			}
		} else {
			for range 1 + g.r.IntN(3) {
				k := g.pick(append(keys, "q"))
				if g.r.IntN(3) == 0 {
					k = g.pick(joinedKeys)
				}
				d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: g.value()})
			}
		}
		switch p := g.r.IntN(20); {
		case p < 2:
			d.HitsAddend = wrapperspb.UInt64(0)
		case p < 5:
			d.HitsAddend = wrapperspb.UInt64(uint64(1 + g.r.IntN(3)))
		case p == 5:
			d.HitsAddend = wrapperspb.UInt64(uint64(50 + g.r.IntN(1_000_000)))
		case p == 6:
			// Up to 10⁹, the import's max_hits_addend: past 10⁹ in a
			// few calls, as a limit of up to 4294967295 counts.
			d.HitsAddend = wrapperspb.UInt64(uint64(1_000_000_000 - g.r.IntN(2)*g.r.IntN(1000)))
		}
		if g.r.IntN(60) == 0 {
			d.Entries = nil
		}
		if g.r.IntN(10) == 0 {
			// Its own limit, of the unit of the rule it finds (which it
			// counts with) or of another (the case's, or any): counted
			// with the rule's when their windows start at one instant,
			// and expiring after the unit added to last.
			u := ownUnit
			if l := lookup(tree, d.Entries); l != nil && !l.unlimited && g.r.IntN(2) == 0 {
				u = l.unit
			} else if g.r.IntN(2) == 0 {
				u = Units[g.r.IntN(len(Units))]
			}
			d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(g.r.IntN(4)), Unit: typev3.RateLimitUnit(u.Number)}
		}
		if g.r.IntN(50) == 0 {
			d.IsNegativeHits = true
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

func (g *gen) pick(s []string) string { return s[g.r.IntN(len(s))] }

// alias is a descriptor whose entries, joined with '_' as the reference
// names its counts, are es's: two neighbouring entries made one, the
// first's value followed by '_', the second's key, '_' and its value
// ((a, x), (b, y) → (a, x_b_y)). It finds another rule than es, or none
// (a shorter descriptor), and counts with es in the reference.
func (g *gen) alias(es []*rlscommon.RateLimitDescriptor_Entry) []*rlscommon.RateLimitDescriptor_Entry {
	i := g.r.IntN(len(es) - 1)
	out := make([]*rlscommon.RateLimitDescriptor_Entry, 0, len(es)-1)
	for _, e := range es[:i] {
		out = append(out, &rlscommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	out = append(out, &rlscommon.RateLimitDescriptor_Entry{Key: es[i].Key, Value: es[i].Value + "_" + es[i+1].Key + "_" + es[i+1].Value})
	for _, e := range es[i+2:] {
		out = append(out, &rlscommon.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	return out
}

// value is a value a call sends: letters, none of them '*'.
func (g *gen) value() string {
	if g.r.IntN(8) == 0 {
		return ""
	}
	var b strings.Builder
	for range 1 + g.r.IntN(3) {
		b.WriteByte("xyz"[g.r.IntN(3)])
	}
	return b.String()
}

// path is entries following the tree from its top, to a random depth: at
// each level a node's key and a value it takes (a wildcard's with its
// '*'s filled in, any value for a bare key).
func (g *gen) path(ns []*node) []*rlscommon.RateLimitDescriptor_Entry {
	var es []*rlscommon.RateLimitDescriptor_Entry
	for len(ns) > 0 {
		n := ns[g.r.IntN(len(ns))]
		v := n.value
		switch {
		case v == "":
			v = g.value()
		case strings.Contains(v, "*") && g.r.IntN(4) == 0:
			// The wildcard's value as written, '*' and all: the reference
			// finds that descriptor first, literally, before any other
			// wildcard (the import's literal copy, which counts with a
			// share_threshold wildcard under its pattern).
		case strings.Contains(v, "*"):
			var b strings.Builder
			for _, part := range strings.Split(v, "*") {
				b.WriteString(part)
				b.WriteString(strings.Repeat("xyz"[g.r.IntN(3):][:1], g.r.IntN(3)))
			}
			v = b.String()
		}
		k := n.key
		switch p := g.r.IntN(10); {
		case p < 2:
			// Split anew at another '_' of KEY_VALUE: the same KEY_VALUE
			// ("a", "x_y" → "a_x", "y"), which the reference finds the
			// same descriptor by, unless another has that key.
			j := k + "_" + v
			var at []int
			for i := range len(j) {
				if j[i] == '_' && i != len(k) {
					at = append(at, i)
				}
			}
			if len(at) > 0 {
				i := at[g.r.IntN(len(at))]
				k, v = j[:i], j[i+1:]
			}
		case p == 2 && v != "":
			// KEY_VALUE made the key, of any value: the bare key the
			// reference looks up last is that descriptor's KEY_VALUE.
			k, v = k+"_"+v, g.value()
		}
		es = append(es, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		if len(n.children) == 0 || g.r.IntN(3) == 0 {
			break
		}
		ns = n.children
	}
	return es
}

// lookup is the limit the reference's lookup finds for entries.
func lookup(ns []*node, es []*rlscommon.RateLimitDescriptor_Entry) *limit {
	_, l := find(ns, es, true)
	return l
}

// find is the reference's lookup of entries in the tree (its GetLimit,
// restated), with joined: at each level the descriptor whose KEY_VALUE
// (KEY, bare) is the entry's KEY_VALUE, then the wildcards in file order
// matching KEY_VALUE, then the descriptor whose KEY_VALUE is the entry's
// bare key; the last entry's node and its limit, never back up. Without
// joined, keys and values apart (the exact value of the key, its
// wildcards, its bare key): what the reference would do if it did not
// join them.
func find(ns []*node, es []*rlscommon.RateLimitDescriptor_Entry, joined bool) (*node, *limit) {
	for i, e := range es {
		var next *node
		full := e.Key + "_" + e.Value
		for _, n := range ns {
			if joined && n.finalKey() == full || !joined && n.value != "" && n.key == e.Key && n.value == e.Value {
				next = n
			}
		}
		if next == nil {
			for _, n := range ns {
				if joined && strings.Contains(n.finalKey(), "*") && globMatch(n.finalKey(), full) || !joined && n.key == e.Key && strings.Contains(n.value, "*") && globMatch(n.value, e.Value) {
					next = n
					break
				}
			}
		}
		if next == nil {
			idx := slices.IndexFunc(ns, func(n *node) bool {
				return joined && n.finalKey() == e.Key || !joined && n.value == "" && n.key == e.Key
			})
			if idx >= 0 {
				next = ns[idx]
			}
		}
		if next == nil {
			return nil, nil
		}
		if i == len(es)-1 {
			return next, next.limit
		}
		if len(next.children) == 0 {
			return nil, nil
		}
		ns = next.children
	}
	return nil, nil
}

// globMatch reports whether value matches pattern, each '*' any run of
// characters.
func globMatch(pattern, value string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == value
	}
	if !strings.HasPrefix(value, parts[0]) {
		return false
	}
	value = value[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(value, p)
		if i < 0 {
			return false
		}
		value = value[i+len(p):]
	}
	return strings.HasSuffix(value, last)
}
