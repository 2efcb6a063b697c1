package envoyimport

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Options tunes an import.
type Options struct {
	// Listen is the [rls] listen address written; "" writes
	// DefaultListen.
	Listen string
	// MergeDomains accepts several files of one domain and merges their
	// descriptors, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true does;
	// false refuses a domain given twice, as it does by default.
	MergeDomains bool
	// AllowStricter carries over, as a comment and a warning, what
	// limitproxy would enforce more strictly than envoyproxy/ratelimit:
	// replaces (the replaced limit is enforced too) and quota_mode (the
	// limit is enforced). false refuses them.
	AllowStricter bool
}

// DefaultListen is the [rls] listen address written when Options.Listen
// is empty: envoyproxy/ratelimit's default gRPC port, on loopback.
const DefaultListen = "127.0.0.1:8081"

// Input is one YAML file to import.
type Input struct {
	Name string // for messages and the header of the output
	Src  []byte
}

// Result is an import's TOML and its warnings (also written in the TOML
// as comments).
type Result struct {
	TOML     []byte
	Warnings []Warning
}

// policy is one [[policy]] of the output.
type policy struct {
	name       string
	domain     string
	descriptor []string // patterns
	key        []string // nil: the default (every entry's value)
	limit      *Limit   // nil: no limit (the lookup ends here)
	shadow     bool
	why        string   // for a policy without limit: why it is there
	notes      []string // comments written above it
}

// Import converts files to one TOML configuration. Every refusal, of
// every file, is in the returned Errors.
func Import(files []Input, o Options) (*Result, error) {
	var (
		errs     Errors
		warnings []Warning
		domains  []*Domain
		byName   = map[string]*Domain{}
	)
	for _, f := range files {
		d, ws, err := Parse(f.Name, f.Src)
		if err != nil {
			errs = append(errs, err.(Errors)...)
			continue
		}
		warnings = append(warnings, ws...)
		prev, dup := byName[d.Name]
		if !dup {
			byName[d.Name] = d
			domains = append(domains, d)
			continue
		}
		if !o.MergeDomains {
			errs = append(errs, Error{File: d.File, Line: d.Line, Col: 1, Msg: fmt.Sprintf("duplicate domain '%s' in config file (also in %s; -merge-domains merges them, as MERGE_DOMAIN_CONFIG=true does)", d.Name, prev.File)})
			continue
		}
		seen := map[string]bool{}
		for _, n := range prev.Nodes {
			seen[n.FinalKey()] = true
		}
		for _, n := range d.Nodes {
			if seen[n.FinalKey()] {
				errs = append(errs, Error{File: d.File, Line: n.Line, Col: n.Col, Msg: fmt.Sprintf("duplicate descriptor composite key '%s.%s' (merging domain %q with %s)", d.Name, n.FinalKey(), d.Name, prev.File)})
				continue
			}
			seen[n.FinalKey()] = true
			prev.Nodes = append(prev.Nodes, n)
		}
		prev.File += ", " + d.File
	}
	c := &converter{o: o, names: map[string]int{}}
	var perDomain [][]*policy
	for _, d := range domains {
		c.file = d.File
		perDomain = append(perDomain, c.domain(d))
	}
	errs = append(errs, c.errs...)
	if len(errs) > 0 {
		return nil, errs
	}
	if n := countPolicies(perDomain); n == 0 {
		return nil, Errors{{File: names(files), Msg: "nothing to import: no descriptor has a rate_limit, so the reference answers OK to every call (and a configuration needs a policy)"}}
	}
	warnings = sortWarnings(files, append(warnings, c.warnings...))
	return &Result{TOML: render(files, domains, perDomain, warnings, o), Warnings: warnings}, nil
}

type converter struct {
	o        Options
	file     string
	errs     Errors
	warnings []Warning
	names    map[string]int
}

func (c *converter) errorf(n *Node, format string, args ...any) {
	c.errs = append(c.errs, Error{File: c.file, Line: n.Line, Col: n.Col, Msg: fmt.Sprintf(format, args...)})
}

func (c *converter) warnf(n *Node, format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	c.warnings = append(c.warnings, Warning{File: c.file, Line: n.Line, Col: n.Col, Msg: msg})
	return fmt.Sprintf("%s:%d: %s", c.file, n.Line, msg)
}

// step is one level of a path: the node and its pattern.
type step struct {
	node    *Node
	pattern string
}

// domain flattens d's tree into policies in the order that makes the
// first match the one envoyproxy/ratelimit's lookup finds.
func (c *converter) domain(d *Domain) []*policy {
	return c.level(d, nil, d.Nodes)
}

// kind orders the descriptors of one key at one level as the reference
// looks them up: the exact value, then the wildcards in file order, then
// the bare key.
func kind(n *Node) int {
	switch {
	case n.Value == "":
		return 2
	case strings.HasSuffix(n.Value, "*"):
		return 1
	}
	return 0
}

// overlap reports whether a value a matched by hi could also be matched by
// lo, of the same key and lower precedence.
func overlap(hi, lo *Node) bool {
	switch {
	case kind(lo) == 2:
		return true
	case kind(hi) == 0: // lo is a wildcard
		return strings.HasPrefix(hi.Value, strings.TrimSuffix(lo.Value, "*"))
	default: // both wildcards
		p, q := strings.TrimSuffix(hi.Value, "*"), strings.TrimSuffix(lo.Value, "*")
		return strings.HasPrefix(p, q) || strings.HasPrefix(q, p)
	}
}

// level returns the policies of the descriptors nodes below path.
func (c *converter) level(d *Domain, path []step, nodes []*Node) []*policy {
	// Order: keys in order of first appearance; for each, exact values,
	// wildcards, the bare key.
	var keys []string
	byKey := map[string][]*Node{}
	for _, n := range nodes {
		if _, ok := byKey[n.Key]; !ok {
			keys = append(keys, n.Key)
		}
		byKey[n.Key] = append(byKey[n.Key], n)
	}
	var out []*policy
	for _, k := range keys {
		var ordered []*Node
		for kd := 0; kd < 3; kd++ {
			for _, n := range byKey[k] {
				if kind(n) == kd {
					ordered = append(ordered, n)
				}
			}
		}
		blocks := make([][]*policy, len(ordered))
		steps := make([][]step, len(ordered))
		for i, n := range ordered {
			if len(path) == maxDepth {
				c.errorf(n, "descriptor %s is %d levels deep: an RLS policy's descriptor has at most %d entries", pathName(d, path, n), len(path)+1, maxDepth)
				continue
			}
			p, ok := c.pattern(n)
			if !ok {
				continue
			}
			steps[i] = append(path[:len(path):len(path)], step{n, p})
			blocks[i] = c.block(d, steps[i])
		}
		for i, n := range ordered {
			if steps[i] == nil {
				continue
			}
			depth := len(path) + 1
			prefix := patterns(steps[i])
			here := blocks[i]
			// What a lower-precedence descriptor of the same key would
			// decide, for values this one takes, must not be reached: the
			// reference's lookup never comes back up a level.
			var stops []*policy
			terminal := len(here) > 0 && here[0].depth() == depth
			for j := i + 1; j < len(ordered); j++ {
				if !overlap(n, ordered[j]) {
					continue
				}
				for _, q := range blocks[j] {
					if q.limit == nil {
						continue
					}
					if q.depth() == depth {
						if !terminal {
							here = append([]*policy{c.stop(d, path, n, prefix, nil,
								"ends the lookup without a limit, as the reference does: "+q.name+" below is not reached")}, here...)
							terminal = true
						}
						continue
					}
					stops = append(stops, c.stop(d, path, n, prefix, q.descriptor[depth:],
						"the reference's lookup goes into "+pathName(d, path, n)+" and finds no limit there: "+q.name+" below is not reached"))
				}
			}
			out = append(out, here...)
			out = append(out, dedupe(stops)...)
		}
	}
	return out
}

func (p *policy) depth() int { return len(p.descriptor) }

// dedupe drops the stop policies of a descriptor already stopped.
func dedupe(ps []*policy) []*policy {
	seen := map[string]bool{}
	var out []*policy
	for _, p := range ps {
		k := strings.Join(p.descriptor, "\x00")
		if !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}

func patterns(path []step) []string {
	out := make([]string, len(path))
	for i, s := range path {
		out[i] = s.pattern
	}
	return out
}

func pathName(d *Domain, path []step, n *Node) string {
	parts := []string{d.Name}
	for _, s := range path {
		parts = append(parts, s.node.FinalKey())
	}
	return strings.Join(append(parts, n.FinalKey()), ".")
}

// stop is a policy without limits for prefix followed by suffix.
func (c *converter) stop(d *Domain, path []step, n *Node, prefix, suffix []string, why string) *policy {
	desc := append(append([]string{}, prefix...), suffix...)
	return &policy{name: c.name(pathName(d, path, n) + ".stop"), domain: d.Name, descriptor: desc, why: why}
}

// block returns the policies of the descriptor at the end of path and of
// its subtree: its own first when it has a limit.
func (c *converter) block(d *Domain, path []step) []*policy {
	n := path[len(path)-1].node
	var out []*policy
	if n.Limit != nil {
		if p := c.policy(d, path); p != nil {
			out = append(out, p)
		}
	}
	return append(out, c.level(d, path, n.Children)...)
}

// maxDepth is the most patterns an RLS policy's descriptor may have.
const maxDepth = 16

// pattern is n's descriptor pattern, or false after a refusal.
func (c *converter) pattern(n *Node) (string, bool) {
	if strings.ContainsAny(n.Key, "=*") {
		c.errorf(n, "key %q: a key with '=' or '*' cannot be expressed in a descriptor pattern", n.Key)
		return "", false
	}
	switch kind(n) {
	case 2:
		return n.Key, true
	case 1:
		if strings.Contains(strings.TrimSuffix(n.Value, "*"), "*") {
			c.errorf(n, "value %q: a '*' before the end (a wildcard in newer envoyproxy/ratelimit, a literal in older) cannot be expressed; only a trailing '*' can", n.Value)
			return "", false
		}
	default:
		if strings.Contains(n.Value, "*") {
			c.errorf(n, "value %q: a '*' before the end (a wildcard in newer envoyproxy/ratelimit, a literal in older) cannot be expressed; only a trailing '*' can", n.Value)
			return "", false
		}
	}
	return n.Key + "=" + n.Value, true
}

var nameBad = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// name makes a unique policy name of the reference's full key.
func (c *converter) name(full string) string {
	s := nameBad.ReplaceAllString(full, "-")
	if s == "" || !isAlnum(s[0]) {
		s = "p" + s
	}
	c.names[s]++
	if n := c.names[s]; n > 1 {
		s = fmt.Sprintf("%s-%d", s, n)
		c.names[s]++
	}
	return s
}

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// policy is the policy of the descriptor at the end of path, which has a
// rate_limit.
func (c *converter) policy(d *Domain, path []step) *policy {
	n := path[len(path)-1].node
	l := n.Limit
	p := &policy{domain: d.Name, limit: l, shadow: n.ShadowMode}
	parts := []string{d.Name}
	for _, s := range path {
		p.descriptor = append(p.descriptor, s.pattern)
		parts = append(parts, s.node.FinalKey())
	}
	p.name = c.name(strings.Join(parts, "."))
	ok := true
	if !l.Unlimited {
		switch {
		case l.RequestsPerUnit == 0:
			c.errorf(n, "requests_per_unit 0 (every request over the limit) cannot be expressed: a fixed window admits at least 1")
			ok = false
		case int64(l.RequestsPerUnit) > maxCount:
			c.errorf(n, "requests_per_unit %d is above limitproxy's largest limit, %d", l.RequestsPerUnit, maxCount)
			ok = false
		}
	} else {
		p.limit = nil
		p.why = "unlimited, as in the reference"
	}
	if l.Name != "" && !nameOK(l.Name) {
		p.notes = append(p.notes, c.warnf(n, "rate_limit name %q is written %q: a limit's name is letters, digits, '.', '_' and '-'", l.Name, limitName(l.Name)))
	}
	if len(l.Replaces) > 0 {
		msg := fmt.Sprintf("replaces %q: limitproxy decides each descriptor on its own and cannot skip another's limit, which it enforces too", l.Replaces)
		if !c.o.AllowStricter {
			c.errorf(n, "%s (-allow-stricter carries the rest over)", msg)
			ok = false
		} else {
			p.notes = append(p.notes, c.warnf(n, "%s", msg))
		}
	}
	if n.QuotaMode {
		msg := "quota_mode (newer envoyproxy/ratelimit) cannot be expressed: the limit is enforced as any other"
		if !c.o.AllowStricter {
			c.errorf(n, "%s (-allow-stricter carries the rest over)", msg)
			ok = false
		} else {
			p.notes = append(p.notes, c.warnf(n, "%s", msg))
		}
	}
	// share_threshold: entries matched through a wildcard that shares its
	// threshold count under the pattern, that is, not under their value.
	var shared, own []string
	count := map[string]int{}
	for _, s := range path {
		count[s.node.Key]++
	}
	for _, s := range path {
		if s.node.ShareThreshold {
			shared = append(shared, s.node.Key)
		} else {
			own = append(own, s.node.Key)
		}
	}
	if len(shared) > 0 {
		p.key = []string{}
		for _, k := range own {
			if count[k] > 1 {
				c.errorf(n, "key %q appears twice in the descriptor and share_threshold applies to another entry: a descriptor: key part cannot tell the two apart", k)
				ok = false
			}
			p.key = append(p.key, "descriptor:"+k)
		}
	}
	for _, s := range path {
		m := s.node
		if m.DetailedMetric || m.ValueToMetric {
			p.notes = append(p.notes, c.warnf(m, "detailed_metric/value_to_metric are not carried over: limitproxy counts per policy (limitproxy_requests_total{policy}) and shows the busiest keys in top offenders"))
		}
		if m.Metadata {
			p.notes = append(p.notes, c.warnf(m, "metadata is not carried over: limitproxy sends none in its answer"))
		}
	}
	if !ok {
		return nil
	}
	return p
}

const maxCount = 1_000_000_000

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func nameOK(s string) bool { return nameRE.MatchString(s) }

func limitName(s string) string {
	if nameOK(s) {
		return s
	}
	s = nameBad.ReplaceAllString(s, "-")
	if s == "" || !isAlnum(s[0]) {
		s = "l" + s
	}
	return s
}

// window is the fixed window of a unit: the length Units gives it, which
// limitproxy aligns to the Unix epoch as the reference does (its
// src/utils/utilities.go, UnitToDivider and CalculateReset: a window is
// the Unix time divided by the unit's seconds, its reset divider −
// now mod divider). The reference's month is 30 days and its year 365,
// not calendar ones, and its weeks start on Thursdays (1970-01-01's
// weekday), so week, month and year are not written as limitproxy's
// calendar windows (window = "week", "month", "year": ISO weeks and
// calendar months from local midnight), which would move where an
// imported limit's windows end; its day is the UTC day, which "24h" is
// exactly (as window = "day" in UTC would be), and "24h" keeps the w of
// RateLimit-Policy. An import decides as the reference did; a user who
// wants calendar months writes window = "month" (docs/algorithms.md).
func window(unit string) string {
	return durationString(time.Duration(Units[unit]) * time.Second)
}

func durationString(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

// sortWarnings orders warnings by file (in the order given), line and
// column, once each.
func sortWarnings(files []Input, ws []Warning) []Warning {
	order := map[string]int{}
	for i, f := range files {
		order[f.Name] = i
	}
	slices.SortStableFunc(ws, func(a, b Warning) int {
		return cmp.Or(cmp.Compare(order[a.File], order[b.File]), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col), strings.Compare(a.Msg, b.Msg))
	})
	return slices.Compact(ws)
}

func countPolicies(perDomain [][]*policy) int {
	n := 0
	for _, ps := range perDomain {
		n += len(ps)
	}
	return n
}

func names(files []Input) string {
	s := make([]string, len(files))
	for i, f := range files {
		s[i] = f.Name
	}
	return strings.Join(s, ", ")
}
