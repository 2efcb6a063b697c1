package policy

import (
	"fmt"
	"net/http"
	"net/textproto"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/internal/limiter"
)

// Set is a compiled configuration: matchers parsed, limits bound to the
// store. The proxy holds the current Set in an atomic pointer and uses one
// Set for the whole of a request. A Set never changes after Compile returns
// it, and is safe for concurrent use.
type Set struct {
	Config   *Config
	Policies []*Policy
	LoadedAt time.Time
}

// Policy is a compiled policy: its spec and its limits bound to a store.
type Policy struct {
	PolicySpec
	Limiter *limiter.Limiter
}

// Compile binds every policy's limits to store. Limit state is keyed by
// policy name and algorithm (see limiter.New), so compiling a new Config
// against the same store keeps the counters of unchanged limits.
func (c *Config) Compile(store limiter.Store, now time.Time) (*Set, error) {
	if store == nil {
		return nil, fmt.Errorf("compile %s: no store", c.File)
	}
	s := &Set{Config: c, LoadedAt: now}
	for _, spec := range c.Policies {
		l, err := limiter.New(store, spec.Name, spec.Limits...)
		if err != nil {
			return nil, fmt.Errorf("compile policy %q: %w", spec.Name, err)
		}
		s.Policies = append(s.Policies, &Policy{PolicySpec: spec, Limiter: l})
	}
	return s, nil
}

// Match returns the first policy whose match table holds for r (SPEC §2:
// policies are tried in file order).
func (s *Set) Match(r *http.Request) (*Policy, bool) {
	for _, p := range s.Policies {
		if p.Match.Matches(r) {
			return p, true
		}
	}
	return nil, false
}

// LimitNames returns the state names of every limit of every policy (see
// limiter.StateNames).
func (c *Config) LimitNames() []string {
	var names []string
	for _, p := range c.Policies {
		names = append(names, limiter.StateNames(p.Name, p.Limits...)...)
	}
	return names
}

// Describe returns a one-line description of p that changes whenever
// anything p does changes; reloads compare descriptions to report which
// policies changed.
func (p *PolicySpec) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "upstream=%s mode=%s key=[", p.Upstream, p.Mode)
	for i, k := range p.Key {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k.String())
	}
	fmt.Fprintf(&b, "] on_missing=%s match={%s} limits=[", p.OnMissing, p.Match.String())
	for i, l := range p.Limits {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(l.String())
	}
	fmt.Fprintf(&b, "] reject=%d", p.Reject.Status)
	if p.Reject.Body != "" {
		fmt.Fprintf(&b, " %q %q", p.Reject.ContentType, p.Reject.Body)
	}
	return b.String()
}

// Upstream returns the upstream named name.
func (c *Config) Upstream(name string) (Upstream, bool) {
	for _, u := range c.Upstreams {
		if u.Name == name {
			return u, true
		}
	}
	return Upstream{}, false
}

// Matcher is a compiled match table: every condition given must hold. The
// zero Matcher matches nothing; a policy without a match table gets one
// that matches everything.
type Matcher struct {
	all     bool
	hosts   []string // lower case; "*.example.com" matches sub-domains
	methods []string
	path    string
	hasPath bool
	prefix  string
	re      *regexp.Regexp
	headers []headerMatch
}

type headerMatch struct {
	name  string // canonical
	value string
	any   bool // "*": present with any value
}

// Matches reports whether r satisfies every condition of m.
func (m *Matcher) Matches(r *http.Request) bool {
	if m.all {
		return true
	}
	if len(m.hosts) > 0 && !matchHost(m.hosts, r.Host) {
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
	if m.re != nil && !m.re.MatchString(path) {
		return false
	}
	for _, h := range m.headers {
		vs, ok := r.Header[h.name]
		if !ok || !h.any && !contains(vs, h.value) {
			return false
		}
	}
	return true
}

// String describes m's conditions, e.g. "methods=[POST] path=/login".
func (m *Matcher) String() string {
	if m.all {
		return "all"
	}
	var parts []string
	if len(m.hosts) > 0 {
		parts = append(parts, fmt.Sprintf("hosts=%v", m.hosts))
	}
	if len(m.methods) > 0 {
		parts = append(parts, fmt.Sprintf("methods=%v", m.methods))
	}
	if m.hasPath {
		parts = append(parts, "path="+m.path)
	}
	if m.prefix != "" {
		parts = append(parts, "path_prefix="+m.prefix)
	}
	if m.re != nil {
		parts = append(parts, "path_regex="+m.re.String())
	}
	for _, h := range m.headers {
		parts = append(parts, fmt.Sprintf("header %s=%q", h.name, h.value))
	}
	return strings.Join(parts, " ")
}

// IsCatchAll reports whether m matches every request.
func (m *Matcher) IsCatchAll() bool { return m.all }

func matchHost(patterns []string, host string) bool {
	host = strings.ToLower(HostName(host))
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

// HostName returns a Host header value without its :port (and an IPv6
// literal without its brackets): what host matching and the "host" key part
// compare.
func HostName(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.Index(host, "]"); i > 0 {
			return host[1:i]
		}
		return host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Count(host, ":") == 1 {
		return host[:i]
	}
	return host
}

func canonicalHeader(name string) string { return textproto.CanonicalMIMEHeaderKey(name) }

func sortHeaders(h []headerMatch) {
	sort.Slice(h, func(i, j int) bool { return h[i].name < h[j].name })
}

// validToken reports whether s is an HTTP token (RFC 9110 §5.6.2).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// KeyKind is the kind of one part of a client key (SPEC §4).
type KeyKind uint8

// The key parts.
const (
	KeyIP     KeyKind = iota + 1 // the client address (trusted proxies considered)
	KeyHeader                    // header:NAME
	KeyQuery                     // query:NAME
	KeyCookie                    // cookie:NAME
	KeyHost                      // the Host, lower case, without port
	KeyMethod
	KeyPath
)

// KeyPart is one element of a policy's key list.
type KeyPart struct {
	Kind KeyKind
	Name string // for header (canonical), query and cookie
}

// String returns the part as the key list writes it, e.g. "header:X-Api-Key".
func (k KeyPart) String() string {
	switch k.Kind {
	case KeyIP:
		return "ip"
	case KeyHeader:
		return "header:" + k.Name
	case KeyQuery:
		return "query:" + k.Name
	case KeyCookie:
		return "cookie:" + k.Name
	case KeyHost:
		return "host"
	case KeyMethod:
		return "method"
	case KeyPath:
		return "path"
	}
	return "?"
}

// ParseKeyPart parses one element of a key list: ip, host, method, path,
// header:NAME, query:NAME or cookie:NAME.
func ParseKeyPart(s string) (KeyPart, error) {
	switch s {
	case "ip":
		return KeyPart{Kind: KeyIP}, nil
	case "host":
		return KeyPart{Kind: KeyHost}, nil
	case "method":
		return KeyPart{Kind: KeyMethod}, nil
	case "path":
		return KeyPart{Kind: KeyPath}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if ok && name != "" {
		switch kind {
		case "header":
			if !validToken(name) {
				return KeyPart{}, fmt.Errorf("%q: %q is not a header name", s, name)
			}
			return KeyPart{Kind: KeyHeader, Name: canonicalHeader(name)}, nil
		case "query":
			return KeyPart{Kind: KeyQuery, Name: name}, nil
		case "cookie":
			if !validToken(name) {
				return KeyPart{}, fmt.Errorf("%q: %q is not a cookie name", s, name)
			}
			return KeyPart{Kind: KeyCookie, Name: name}, nil
		}
	}
	return KeyPart{}, fmt.Errorf("%q is not a key part (want ip, host, method, path, header:NAME, query:NAME or cookie:NAME)", s)
}
