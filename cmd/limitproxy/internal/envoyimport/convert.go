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
	// JoinedKeys writes [rls] count_keys = "joined": each descriptor's
	// count named as the reference names it, keys and values joined with
	// '_' (descriptors whose joins are equal share one count); and
	// lookup = "joined", the reference's lookup by KEY_VALUE, with the
	// policies laid out as its tree (levelJoined). false leaves the
	// defaults, "distinct", and the policies in first-match order.
	JoinedKeys bool
	// Settings are the reference's environment settings that change its
	// answers; the zero value is its defaults.
	Settings Settings
}

// Settings are envoyproxy/ratelimit's environment settings that change
// what it answers, which the import writes into [rls].
type Settings struct {
	// ResponseHeaders is LIMIT_RESPONSE_HEADERS_ENABLED, and LimitHeader,
	// RemainingHeader and ResetHeader its LIMIT_LIMIT_HEADER,
	// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER ("": its defaults).
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string
	// ShadowMode is SHADOW_MODE, QuotaMode QUOTA_MODE.
	ShadowMode, QuotaMode bool
	// StopIncrement is STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
	// DynamicMetadata RESPONSE_DYNAMIC_METADATA.
	StopIncrement, DynamicMetadata bool
	// ExpirationJitterMax is EXPIRATION_JITTER_MAX_SECONDS, in seconds
	// (0: none, limitproxy's default; the reference's, 300, is not
	// assumed).
	ExpirationJitterMax int64
}

// MaxJitterSeconds is the largest EXPIRATION_JITTER_MAX_SECONDS written:
// [rls] expiration_jitter_max's bound, a year.
const MaxJitterSeconds = 365 * 24 * 3600

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
	limit      *Limit   // nil: no limit (the lookup ends here, OK)
	unlimited  bool     // unlimited: true (limit nil)
	from       *Limit   // the rate_limit it is made of; nil for one without
	shadow     bool
	quota      bool
	replaces   []string
	metadata   map[string]interface{} // the rate_limit's descriptor's metadata
	toMetric   []string               // value_to_metric entries ("KEY", "KEY#N"); nil: not written
	why        string                 // for a policy without limit: why it is there
	notes      []string               // comments written above it
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
		ps := c.domain(d)
		if len(ps) == 0 {
			// Every call of the domain is OK; a policy without limits
			// makes it a domain the service knows (where a descriptor's
			// own limit applies), and a configuration has a policy.
			ps = []*policy{{name: c.name(d.Name + ".known"), domain: d.Name, descriptor: []string{"*"},
				why: "no descriptor of the domain has a limit: every call is OK; this policy makes the domain known"}}
		}
		perDomain = append(perDomain, ps)
	}
	errs = append(errs, c.errs...)
	if len(errs) > 0 {
		return nil, errs
	}
	warnings = sortWarnings(files, append(warnings, c.warnings...))
	return &Result{TOML: render(files, domains, perDomain, warnings, o, c.depth), Warnings: warnings}, nil
}

type converter struct {
	o        Options
	file     string
	errs     Errors
	warnings []Warning
	names    map[string]int
	depth    int // the most entries of a policy's descriptor
}

func (c *converter) errorf(n *Node, format string, args ...any) {
	c.errs = append(c.errs, Error{File: c.file, Line: n.Line, Col: n.Col, Msg: fmt.Sprintf(format, args...)})
}

func (c *converter) warnf(n *Node, format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	c.warnings = append(c.warnings, Warning{File: c.file, Line: n.Line, Col: n.Col, Msg: msg})
	return fmt.Sprintf("%s:%d: %s", c.file, n.Line, msg)
}

// notef is a note at n written above its policy only: something carried
// over that answers as the reference does.
func (c *converter) notef(n *Node, format string, args ...any) string {
	return fmt.Sprintf("%s:%d: %s", c.file, n.Line, fmt.Sprintf(format, args...))
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
// looks them up: the exact value, then the wildcards (a value with '*'
// anywhere) in file order, then the bare key.
func kind(n *Node) int {
	switch {
	case n.literal:
		return 0
	case n.Value == "":
		return 2
	case strings.Contains(n.Value, "*"):
		return 1
	}
	return 0
}

// overlap reports whether a value matched by hi could also be matched by
// lo, of the same key and lower precedence. It may say so of two that do
// not meet: that adds a policy that ends a lookup the reference would
// end there too, never one that changes an answer.
func overlap(hi, lo *Node) bool {
	switch {
	case kind(lo) == 2:
		return true
	case kind(hi) == 0: // lo is a wildcard
		return globMatch(lo.Value, hi.Value)
	default: // both wildcards
		return globsMeet(hi.Value, lo.Value)
	}
}

// level returns the policies of the descriptors nodes below path.
func (c *converter) level(d *Domain, path []step, nodes []*Node) []*policy {
	if c.o.JoinedKeys {
		return c.levelJoined(d, path, nodes)
	}
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
		// The reference looks KEY_VALUE up literally first: a value with
		// '*' finds the wildcard descriptor it equals, before any other
		// wildcard. Each wildcard has a literal copy among the exact
		// values (the same limit and subtree). One that shares its
		// threshold counts under its pattern, which is that value: the
		// copy leaves the entry out of its key as the wildcard does, and
		// with compatibility both count under the descriptor's name
		// (proxy's countKey), the pattern for the entry: one count.
		for _, n := range byKey[k] {
			if kind(n) == 1 {
				lit := *n
				lit.literal = true
				byKey[k] = append(byKey[k], &lit)
			}
		}
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
			if steps[i] = c.stepTo(d, path, n); steps[i] != nil {
				blocks[i] = c.block(d, steps[i])
			}
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
					if q.limit == nil && !q.unlimited {
						// Nothing to hide: a policy without a limit answers
						// as no policy does.
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

// stepTo is path with its step to n, nil when n is left out: past
// maxDepth (an error at n), or without a pattern.
func (c *converter) stepTo(d *Domain, path []step, n *Node) []step {
	if len(path) == maxDepth {
		c.errorf(n, "descriptor %s is %d levels deep: an RLS policy's descriptor has at most %d entries (limitproxy's bound; the reference has none)", pathName(d, path, n), len(path)+1, maxDepth)
		return nil
	}
	c.depth = max(c.depth, len(path)+1)
	p, ok := c.pattern(n)
	if !ok {
		return nil
	}
	return append(path[:len(path):len(path)], step{n, p})
}

// levelJoined is level for [rls] lookup = "joined", which reads a
// domain's policies as the reference's tree (policy.Set.MatchDescriptor)
// and looks it up as the reference does: each descriptor in file order
// (the order of a level's wildcards), a wildcard's literal copy before
// it (the descriptor that a KEY_VALUE equal to its pattern finds: the
// same limit and subtree), and a policy without limit for each
// descriptor without rate_limit and without descriptors below it, which
// ends a lookup there as the reference's does. No other policy is
// added: the tree's lookup needs none to hide another.
func (c *converter) levelJoined(d *Domain, path []step, nodes []*Node) []*policy {
	var out []*policy
	for _, n := range nodes {
		list := []*Node{n}
		if kind(n) == 1 {
			lit := *n
			lit.literal = true
			list = []*Node{&lit, n}
		}
		for _, m := range list {
			st := c.stepTo(d, path, m)
			if st == nil {
				continue
			}
			here := c.block(d, st)
			if len(here) == 0 {
				here = []*policy{c.stop(d, path, m, patterns(st), nil, "ends the lookup without a limit, as the reference does")}
			}
			out = append(out, here...)
		}
	}
	return out
}

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
	return &policy{name: c.name(pathName(d, path, n) + literalSuffix(append(path[:len(path):len(path)], step{node: n})) + ".stop"), domain: d.Name, descriptor: desc, why: why}
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

// metadataDropped reports whether the reference's GetLimit answers the
// rate_limit at the end of path without its metadata, whatever the call:
// it makes the limit anew (NewRateLimit, which has none) when the
// descriptor has detailed_metric and nothing below it. Without
// detailed_metric it does so when the value_to_metric key of the call
// differs from the limit's full key, which the call decides (a
// value_to_metric entry with a value found through a wildcard or a bare
// key): the policy's value_to_metric (toMetric) says which entries have
// it, and limitproxy decides with each call (proxy's metricKeyKept).
func metadataDropped(path []step) bool {
	n := path[len(path)-1].node
	return n.DetailedMetric && len(n.Children) == 0
}

// toMetric is the value_to_metric entries of the policy at the end of
// path, which has metadata and no detailed_metric: each descriptor of
// path with value_to_metric and without share_threshold (whose pattern
// the reference's key takes first), named "KEY", or "KEY#N" for the Nth
// of a key the path has more than once. nil when there is none and
// joined is false (the metadata is then sent as it is); empty when
// joined (the lookup by KEY_VALUE can drop it through any wildcard).
func toMetric(path []step, joined bool) []string {
	count, nth := map[string]int{}, map[string]int{}
	for _, s := range path {
		count[s.node.Key]++
	}
	var out []string
	if joined {
		out = []string{}
	}
	for _, s := range path {
		k := s.node.Key
		nth[k]++
		if !s.node.ValueToMetric || s.node.ShareThreshold {
			continue
		}
		if count[k] > 1 {
			out = append(out, fmt.Sprintf("%s#%d", k, nth[k]))
		} else {
			out = append(out, k)
		}
	}
	return out
}

// literalSuffix is ".literal" for a path through a wildcard's literal
// copy: its policies are named apart, and the wildcard's keep their
// names (and so their counts).
func literalSuffix(path []step) string {
	for _, s := range path {
		if s.node.literal {
			return ".literal"
		}
	}
	return ""
}

// maxDepth is the most patterns an RLS policy's descriptor may have.
const maxDepth = 64

// pattern is n's descriptor pattern, or false when n is left out: a
// '\\', '*' or '=' of its key, a '\\' of its value, and a '*' of the value
// of a literal copy, escaped with '\\'.
func (c *converter) pattern(n *Node) (string, bool) {
	if strings.Contains(n.Key, "*") && !n.literal && !c.o.JoinedKeys {
		c.warnf(n, "key %q is matched as written: the reference takes its '*' as a wildcard over the entry's KEY_VALUE (as -joined-keys does)", n.Key)
	}
	key := escape(n.Key, `\*=`)
	if kind(n) == 2 {
		return key, true
	}
	if n.literal {
		return key + "=" + escape(n.Value, `\*`), true
	}
	return key + "=" + escape(n.Value, `\`), true
}

// escape puts a '\\' before each byte of s in special.
func escape(s, special string) string {
	var b strings.Builder
	for i := range len(s) {
		if strings.IndexByte(special, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
	p := &policy{domain: d.Name, limit: l, from: l, shadow: n.ShadowMode, replaces: l.Replaces}
	parts := []string{d.Name}
	for _, s := range path {
		p.descriptor = append(p.descriptor, s.pattern)
		parts = append(parts, s.node.FinalKey())
	}
	p.name = c.name(strings.Join(parts, ".") + literalSuffix(path))
	if l.Unlimited {
		p.limit, p.unlimited, p.shadow = nil, true, false
		if l.Name != "" {
			p.notes = append(p.notes, c.notef(n, "an unlimited limit's name (%q) is not used: the reference never replaces an unlimited limit", l.Name))
		}
	} else {
		p.quota = n.QuotaMode
	}
	if n.Metadata && !l.Unlimited && metadataDropped(path) {
		p.notes = append(p.notes, c.notef(n, "metadata: never sent, as the reference sends none for this rate_limit (its GetLimit makes the limit anew, without metadata, for detailed_metric on a descriptor without descriptors below it)"))
	} else if n.Metadata && !l.Unlimited {
		p.metadata = n.MetadataMap
		if !n.DetailedMetric {
			p.toMetric = toMetric(path, c.o.JoinedKeys)
		}
		if hasNull(n.MetadataMap) {
			p.notes = append(p.notes, c.warnf(n, "metadata: a null is left out (TOML has none); the reference sends it as a null value"))
		}
	}
	if n.QuotaMode && l.Unlimited {
		p.notes = append(p.notes, c.notef(n, "quota_mode on an unlimited limit changes nothing, as in the reference"))
	}
	if l.Name != "" && !l.Unlimited && !nameOK(l.Name) {
		p.notes = append(p.notes, c.warnf(n, "rate_limit name %q is written %q: a limit's name is letters, digits, '.', '_' and '-' (current_limit carries it so written)", l.Name, limitName(l.Name)))
	}
	for _, r := range l.Replaces {
		if !nameOK(r) {
			p.notes = append(p.notes, c.warnf(n, "replaces name %q is written %q, as a limit's name is", r, limitName(r)))
		}
	}
	// share_threshold: entries matched through a wildcard that shares its
	// threshold count under the pattern, that is, not under their value.
	shares := false
	for _, s := range path {
		shares = shares || s.node.ShareThreshold
	}
	if shares {
		// Each entry that shares nothing, by its key, or by its place
		// among the entries of its key ("descriptor:KEY#N") when the key
		// is there more than once.
		p.key = []string{}
		count, nth := map[string]int{}, map[string]int{}
		for _, s := range path {
			count[s.node.Key]++
		}
		for _, s := range path {
			k := s.node.Key
			nth[k]++
			switch {
			case s.node.ShareThreshold:
			case count[k] > 1:
				p.key = append(p.key, fmt.Sprintf("descriptor:%s#%d", k, nth[k]))
			default:
				p.key = append(p.key, "descriptor:"+k)
			}
		}
	}
	for _, s := range path {
		m := s.node
		if m.DetailedMetric || m.ValueToMetric {
			p.notes = append(p.notes, c.notef(m, "detailed_metric/value_to_metric: the reference's stats by value; limitproxy counts this policy's decisions (limitproxy_requests_total{policy=%q}) and shows its busiest values in the top offenders", p.name))
		}
		if m.Metadata && m != n {
			p.notes = append(p.notes, c.notef(m, "metadata of a descriptor above the limit's: never sent, as in the reference"))
		}
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
