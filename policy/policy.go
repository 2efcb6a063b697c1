// Package policy is a configuration compiled for the data path: each
// policy's match table turned into a matcher and its limits bound to a
// store, in a Set that never changes once built. The proxy holds the
// current Set in an atomic pointer and uses one Set for the whole of a
// request; a reload compiles a new one.
package policy

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/perkey"
	"github.com/limitproxy/limitproxy/policy/config"
)

// Set is a compiled configuration: matchers built, limits bound to the
// store. A Set never changes after Compile returns it, and is safe for
// concurrent use.
type Set struct {
	Config   *config.Config
	Policies []*Policy
	LoadedAt time.Time
	// Unmatched is what a request no policy matches is forwarded under:
	// a policy of no limits, named "", on [server] unmatched_upstream,
	// that no request matches; nil when such a request is refused (404).
	// It is not in Policies.
	Unmatched *Policy
	index     *index
	fold      *index                 // index for MatchFold (lower-case paths); nil with few policies
	cased     bool                   // a policy's path, prefix or regex holds an upper-case or non-ASCII byte
	hosts     bool                   // a policy has hosts: Match needs the request's
	rls       map[string][]*Policy   // RLS policies by domain, in file order
	joined    map[string]*joinedNode // [rls] lookup = "joined": each domain's tree; nil otherwise
	store     limiter.Store
}

// Policy is a compiled policy: its validated configuration, its matcher
// and its limits bound to a store.
type Policy struct {
	config.Policy
	// Limiter decides the policy's rate limits; nil when it has none
	// (only a [policy.concurrency], or an RLS policy without limits).
	Limiter *limiter.Limiter
	// Slots holds the in-flight counts of its [policy.concurrency]; nil
	// without one.
	Slots perkey.Slots
	// Deferred holds, for each of Limits that reads the upstream's answer
	// (Charges), a Limiter of that limit alone; nil for the others, and
	// nil when no limit reads the answer.
	Deferred []*limiter.Limiter
	matcher  matcher
}

// Compile binds every policy of c to store. Limit state is keyed by policy
// name and algorithm (see limiter.New), so compiling a new Config against
// the same store keeps the counters of unchanged limits.
func Compile(c *config.Config, store limiter.Store, now time.Time) (*Set, error) {
	if store == nil {
		return nil, fmt.Errorf("compile %s: no store", c.File)
	}
	s := &Set{Config: c, LoadedAt: now, store: store}
	for _, spec := range c.Policies {
		p := &Policy{Policy: spec}
		if len(spec.Limits) > 0 || spec.Concurrency == nil && !spec.Match.RLS() {
			l, err := limiter.New(store, spec.Name, spec.Limits...)
			if err != nil {
				return nil, fmt.Errorf("compile policy %q: %w", spec.Name, err)
			}
			p.Limiter = l
			for i, ch := range spec.Charges {
				if ch.Deferred() {
					if p.Deferred == nil {
						p.Deferred = make([]*limiter.Limiter, len(spec.Limits))
					}
					p.Deferred[i] = l.Only(i)
				}
			}
		}
		if spec.Concurrency != nil {
			slots, ok := store.(perkey.Slots)
			if !ok {
				return nil, fmt.Errorf("compile policy %q: the store does not hold concurrency slots", spec.Name)
			}
			p.Slots = slots
		}
		p.matcher = newMatcher(&p.Match)
		s.hosts = s.hosts || len(p.Match.Hosts) > 0
		s.Policies = append(s.Policies, p)
		if d := p.Match.RLSDomain; d != "" {
			if s.rls == nil {
				s.rls = map[string][]*Policy{}
			}
			s.rls[d] = append(s.rls[d], p)
		}
	}
	if c.RLS.Lookup == config.LookupJoined {
		s.joined = joinedTrees(s.rls)
	}
	s.index = newIndex(s.Policies, false)
	if len(s.Policies) > smallSet {
		s.fold = newIndex(s.Policies, true)
	}
	for _, p := range s.Policies {
		m := &p.Match
		s.cased = s.cased || cased(m.Path) || cased(m.PathPrefix) || m.PathRegex != nil && cased(m.PathRegex.String())
	}
	if up := c.Server.UnmatchedUpstream; up != "" {
		s.Unmatched = &Policy{Policy: config.Policy{Index: -1, Upstream: up, Mode: config.Enforce, OnMissing: config.DefaultOnMissing}}
		s.Unmatched.Class, s.Unmatched.ClassName = unmatchedClass(c, up)
	}
	return s, nil
}

// cased reports whether s holds an upper-case ASCII letter or a non-ASCII
// byte: a byte that another case may spell otherwise.
func cased(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// Claims gives the claims of a request's token, verified once by the
// caller ([identity]): false for a claim the token does not have, and for
// every claim when the request has no valid token.
type Claims interface {
	Claim(path string) (string, bool)
}

// Match returns the first policy whose match table holds for r (policies
// are tried in file order). r must be in its canonical form (see proxy):
// host in lower case without trailing dot, path normalized. A policy with
// claims conditions never matches: use MatchClaims.
func (s *Set) Match(r *http.Request) (*Policy, bool) { return s.MatchClaims(r, nil) }

// MatchClaims is Match for a request whose token's claims are c (nil:
// none), which claims conditions read.
func (s *Set) MatchClaims(r *http.Request, c Claims) (*Policy, bool) {
	host := ""
	if s.hosts {
		host = requestHost(r)
	}
	if s.index == nil || len(s.Policies) <= smallSet {
		for _, p := range s.Policies {
			if p.matcher.matches(r, host, c) {
				return p, true
			}
		}
		return nil, false
	}
	var buf [64]int
	for _, i := range s.index.candidates(r.URL.Path, host, buf[:0]) {
		if p := s.Policies[i]; p.matcher.matches(r, host, c) {
			return p, true
		}
	}
	return nil, false
}

// MatchFold is Match as an upstream that routes paths without regard to
// case sees the policies (Express by default, ASP.NET Core, IIS): r's path
// is compared with each exact path and path prefix in any case
// (strings.EqualFold), and with each path_regex case-insensitively; hosts,
// methods and headers as Match compares them. The proxy refuses a request
// that MatchFold gives another policy than Match (docs/security-model.md,
// path readings). Safe for concurrent use.
func (s *Set) MatchFold(r *http.Request) (*Policy, bool) { return s.MatchFoldClaims(r, nil) }

// MatchFoldClaims is MatchFold for a request whose token's claims are c
// (MatchClaims).
func (s *Set) MatchFoldClaims(r *http.Request, c Claims) (*Policy, bool) {
	host := ""
	if s.hosts {
		host = requestHost(r)
	}
	path := r.URL.Path
	if s.fold == nil || cased(strings.ToLower(path)) {
		// Few policies, or a path whose lower case is not ASCII (where
		// strings.ToLower and EqualFold may disagree): every policy.
		for _, p := range s.Policies {
			if p.matcher.matchesFold(r, host, c) {
				return p, true
			}
		}
		return nil, false
	}
	var buf [64]int
	for _, i := range s.fold.candidates(strings.ToLower(path), host, buf[:0]) {
		if p := s.Policies[i]; p.matcher.matchesFold(r, host, c) {
			return p, true
		}
	}
	return nil, false
}

// CasedPaths reports whether a policy's path, path_prefix or path_regex
// holds an upper-case or non-ASCII letter: only then can MatchFold give a
// path in lower case another policy than Match does.
func (s *Set) CasedPaths() bool { return s.cased }

// requestHost is r's host as hosts entries are compared with it: without
// its port, in lower case.
func requestHost(r *http.Request) string { return strings.ToLower(config.HostName(r.Host)) }

// DescriptorEntry is one entry of an Envoy rate limit descriptor: a key
// and its value.
type DescriptorEntry struct{ Key, Value string }

// MatchDescriptor returns the first RLS policy (in file order) whose
// rls_domain is domain and whose descriptor patterns match entries, one
// pattern per entry and as many patterns as entries (docs/envoy.md);
// with [rls] lookup = "joined", the policy envoyproxy/ratelimit's lookup
// finds in the domain's policies read as its tree (matchJoined), whose
// patterns need not match the entries apart (SeenEntries).
func (s *Set) MatchDescriptor(domain string, entries []DescriptorEntry) (*Policy, bool) {
	if s.joined != nil {
		return s.matchJoined(domain, entries)
	}
	for _, p := range s.rls[domain] {
		if matchEntries(p.Match.Descriptor, entries) {
			return p, true
		}
	}
	return nil, false
}

// MatchBucket is MatchDescriptor for an unordered descriptor: the bucket
// of Envoy's rate limit quota service (docs/envoy.md, RLQS), a map whose
// entries have no order and distinct keys. A policy matches when entries
// has as many entries as its descriptor has patterns and each pattern
// matches the entry of its key; so a policy whose patterns name one key
// twice never matches a bucket. It returns the first such policy of
// domain, in file order, and entries in the order of its patterns (the
// order its key parts read them in); entries is not changed.
func (s *Set) MatchBucket(domain string, entries []DescriptorEntry) (*Policy, []DescriptorEntry, bool) {
	var stack [16]DescriptorEntry
	for _, p := range s.rls[domain] {
		ps := p.Match.Descriptor
		if len(ps) != len(entries) {
			continue
		}
		ordered := stack[:0]
		if len(ps) > len(stack) {
			ordered = make([]DescriptorEntry, 0, len(ps))
		}
		var used uint64 // entries taken, by index (16 at most: config's bound)
		for _, pat := range ps {
			for i, e := range entries {
				if e.Key == pat.Key && used&(1<<i) == 0 {
					ordered, used = append(ordered, e), used|1<<i
					break
				}
			}
		}
		if len(ordered) == len(ps) && len(ps) <= 64 && matchEntries(ps, ordered) {
			return p, slices.Clone(ordered), true
		}
	}
	return nil, nil, false
}

// KnownDomain reports whether domain is an RLS domain of s: one its RLS
// policies name, or one of [rls] domains.
func (s *Set) KnownDomain(domain string) bool {
	if _, ok := s.rls[domain]; ok {
		return true
	}
	for _, d := range s.Config.RLS.Domains {
		if d == domain {
			return true
		}
	}
	return false
}

// Store is the store s's limits are bound to (Compile's).
func (s *Set) Store() limiter.Store { return s.store }

func matchEntries(ps []config.DescriptorPattern, entries []DescriptorEntry) bool {
	if len(ps) != len(entries) {
		return false
	}
	for i, e := range entries {
		if !ps[i].Matches(e.Key, e.Value) {
			return false
		}
	}
	return true
}

// smallSet is the number of policies up to which trying each in turn is
// as quick as asking the index.
const smallSet = 8

// scan is Match without the index: every policy in file order (the
// index's tests' oracle).
func (s *Set) scan(r *http.Request) (*Policy, bool) {
	for _, p := range s.Policies {
		if p.matcher.matches(r, requestHost(r), nil) {
			return p, true
		}
	}
	return nil, false
}

// matcher is a compiled match table: every condition given must hold.
type matcher struct {
	never   bool // an RLS policy's: no HTTP request matches it
	all     bool
	hosts   []string // lower case; "*.example.com" matches sub-domains
	methods []string
	path    string
	hasPath bool
	prefix  string
	m       *config.Match  // regexp and headers
	foldRe  *regexp.Regexp // m.PathRegex, case-insensitive (MatchFold)
}

func newMatcher(m *config.Match) matcher {
	mt := matcher{never: m.RLS(), all: m.All, hosts: m.Hosts, methods: m.Methods, path: m.Path, hasPath: m.HasPath, prefix: m.PathPrefix, m: m}
	if m.PathRegex != nil {
		// A valid expression with a flag group before it is valid.
		mt.foldRe = regexp.MustCompile("(?i)" + m.PathRegex.String())
	}
	return mt
}

// matches reports whether r, whose host is host (requestHost; needed
// only when m has hosts) and whose token's claims are c (nil: none),
// satisfies every condition of m.
func (m *matcher) matches(r *http.Request, host string, c Claims) bool {
	return m.match(r, host, c, false)
}

// matchesFold is matches with r's path compared without regard to case
// (MatchFold).
func (m *matcher) matchesFold(r *http.Request, host string, c Claims) bool {
	return m.match(r, host, c, true)
}

// match is matches, and with fold matchesFold.
func (m *matcher) match(r *http.Request, host string, c Claims, fold bool) bool {
	if m.never {
		return false
	}
	if m.all {
		return true
	}
	if len(m.hosts) > 0 && !matchHost(m.hosts, host) {
		return false
	}
	if len(m.methods) > 0 && !contains(m.methods, r.Method) {
		return false
	}
	path := r.URL.Path
	switch {
	case !fold:
		if m.hasPath && path != m.path || m.prefix != "" && !strings.HasPrefix(path, m.prefix) {
			return false
		}
		if re := m.m.PathRegex; re != nil && !re.MatchString(path) {
			return false
		}
	default:
		if m.hasPath && !strings.EqualFold(path, m.path) || m.prefix != "" && !hasPrefixFold(path, m.prefix) {
			return false
		}
		if m.foldRe != nil && !m.foldRe.MatchString(path) {
			return false
		}
	}
	for _, h := range m.m.Headers {
		vs, ok := r.Header[h.Name]
		if !ok || !h.Any && !contains(vs, h.Value) {
			return false
		}
	}
	for _, cm := range m.m.Claims {
		if c == nil {
			return false
		}
		if v, ok := c.Claim(cm.Path); !ok || v != cm.Value {
			return false
		}
	}
	return true
}

// hasPrefixFold reports whether s begins with prefix in any case: whether
// some prefix of s equals prefix under strings.EqualFold.
func hasPrefixFold(s, prefix string) bool {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return true
	}
	if !cased(s) && !cased(prefix) {
		return false
	}
	// Case pairs of different lengths in UTF-8 (K and the Kelvin sign):
	// compare rune by rune.
	for _, pr := range prefix {
		if s == "" {
			return false
		}
		sr, n := utf8.DecodeRuneInString(s)
		if sr != pr && !strings.EqualFold(string(sr), string(pr)) {
			return false
		}
		s = s[n:]
	}
	return true
}

// matchHost reports whether host (requestHost) is one of patterns.
func matchHost(patterns []string, host string) bool {
	for _, p := range patterns {
		if suffix, ok := strings.CutPrefix(p, "*"); ok {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
		} else if host == p {
			return true
		}
	}
	return false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// unmatchedClass is the priority class of the requests forwarded to
// upstream up because no policy matches them, under its
// [upstream.concurrency] classes: "default" if it has one, else its
// lowest.
func unmatchedClass(c *config.Config, up string) (int, string) {
	for _, u := range c.Upstreams {
		if u.Name != up || u.Concurrency == nil || len(u.Concurrency.Classes) == 0 {
			continue
		}
		cls := u.Concurrency.Classes
		for i, cl := range cls {
			if cl.Name == config.DefaultClass {
				return i, cl.Name
			}
		}
		return len(cls) - 1, cls[len(cls)-1].Name
	}
	return 0, ""
}
