// Package policy is a configuration compiled for the data path: each
// policy's match table turned into a matcher and its limits bound to a
// store, in a Set that never changes once built. The proxy holds the
// current Set in an atomic pointer and uses one Set for the whole of a
// request; a reload compiles a new one.
package policy

import (
	"fmt"
	"net/http"
	"strings"
	"time"

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
	index    *index
	hosts    bool                 // a policy has hosts: Match needs the request's
	rls      map[string][]*Policy // RLS policies by domain, in file order
}

// Policy is a compiled policy: its validated configuration, its matcher
// and its limits bound to a store.
type Policy struct {
	config.Policy
	// Limiter decides the policy's rate limits; nil when it has none
	// (only a [policy.concurrency]).
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
	s := &Set{Config: c, LoadedAt: now}
	for _, spec := range c.Policies {
		p := &Policy{Policy: spec}
		if len(spec.Limits) > 0 || spec.Concurrency == nil {
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
	s.index = newIndex(s.Policies)
	return s, nil
}

// Match returns the first policy whose match table holds for r (policies
// are tried in file order). r must be in its canonical form (see proxy):
// host in lower case without trailing dot, path normalized.
func (s *Set) Match(r *http.Request) (*Policy, bool) {
	host := ""
	if s.hosts {
		host = requestHost(r)
	}
	if s.index == nil || len(s.Policies) <= smallSet {
		for _, p := range s.Policies {
			if p.matcher.matches(r, host) {
				return p, true
			}
		}
		return nil, false
	}
	var buf [64]int
	for _, i := range s.index.candidates(r, host, buf[:0]) {
		if p := s.Policies[i]; p.matcher.matches(r, host) {
			return p, true
		}
	}
	return nil, false
}

// requestHost is r's host as hosts entries are compared with it: without
// its port, in lower case.
func requestHost(r *http.Request) string { return strings.ToLower(config.HostName(r.Host)) }

// DescriptorEntry is one entry of an Envoy rate limit descriptor: a key
// and its value.
type DescriptorEntry struct{ Key, Value string }

// MatchDescriptor returns the first RLS policy (in file order) whose
// rls_domain is domain and whose descriptor patterns match entries, one
// pattern per entry and as many patterns as entries (docs/envoy.md).
func (s *Set) MatchDescriptor(domain string, entries []DescriptorEntry) (*Policy, bool) {
	for _, p := range s.rls[domain] {
		if matchEntries(p.Match.Descriptor, entries) {
			return p, true
		}
	}
	return nil, false
}

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
		if p.matcher.matches(r, requestHost(r)) {
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
	m       *config.Match // regexp and headers
}

func newMatcher(m *config.Match) matcher {
	return matcher{never: m.RLS(), all: m.All, hosts: m.Hosts, methods: m.Methods, path: m.Path, hasPath: m.HasPath, prefix: m.PathPrefix, m: m}
}

// matches reports whether r, whose host is host (requestHost; needed
// only when m has hosts), satisfies every condition of m.
func (m *matcher) matches(r *http.Request, host string) bool {
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
	if m.hasPath && path != m.path {
		return false
	}
	if m.prefix != "" && !strings.HasPrefix(path, m.prefix) {
		return false
	}
	if re := m.m.PathRegex; re != nil && !re.MatchString(path) {
		return false
	}
	for _, h := range m.m.Headers {
		vs, ok := r.Header[h.Name]
		if !ok || !h.Any && !contains(vs, h.Value) {
			return false
		}
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
