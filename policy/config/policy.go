package config

import (
	"fmt"
	"net/textproto"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// LimitNames returns the state names of every limit of every policy (see
// driver.StateNames).
func (c *Config) LimitNames() []string {
	var names []string
	for _, p := range c.Policies {
		ds := make([]driver.Limit, len(p.Limits))
		for i, l := range p.Limits {
			ds[i] = l.Driver()
		}
		names = append(names, driver.StateNames(p.Name, ds...)...)
	}
	return names
}

// Describe returns a one-line description of p that changes whenever
// anything p does changes; reloads compare descriptions to report which
// policies changed.
func (p *Policy) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "upstream=%s mode=%s key=[", p.Upstream, p.Mode)
	for i, k := range p.Key {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k.String())
	}
	fmt.Fprintf(&b, "] on_missing=%s match={%s} limits=[", p.OnMissing, p.Match.String())
	pk := LimitKey{Parts: p.Key, OnMissing: p.OnMissing}
	for i, l := range p.Limits {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(l.String())
		if i < len(p.LimitKeys) && !p.LimitKeys[i].Equal(pk) {
			b.WriteString(" key=" + p.LimitKeys[i].String())
		}
		if name := p.LimitName(i); name != p.derivedLimitName(i) {
			b.WriteString(" name=" + name)
		}
	}
	fmt.Fprintf(&b, "] reject=%d", p.Reject.Status)
	if p.Reject.Body != "" {
		fmt.Fprintf(&b, " %q %q", p.Reject.ContentType, p.Reject.Body)
	}
	return b.String()
}

// LimitName returns the name limit i of p goes by in the RateLimit fields,
// the identifier of its quota policy item (docs/responses.md): the
// limit's name key if it sets one; a shared limit's [[shared_limit]]
// name; the policy's name for the policy's only limit of its own; and
// otherwise the policy's name, a dot and the limit's position from 1
// ("api.2"). Names are unique within a policy.
func (p *Policy) LimitName(i int) string {
	if i < len(p.LimitNames) && p.LimitNames[i] != "" {
		return p.LimitNames[i]
	}
	return p.derivedLimitName(i)
}

// derivedLimitName is LimitName for a limit without a name key.
func (p *Policy) derivedLimitName(i int) string {
	if i < 0 || i >= len(p.Limits) {
		return p.Name
	}
	if s := p.Limits[i].Share(); s != "" {
		return s
	}
	own := 0
	for _, l := range p.Limits {
		if l.Share() == "" {
			own++
		}
	}
	if own == 1 {
		return p.Name
	}
	return p.Name + "." + strconv.Itoa(i+1)
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

// Match is a validated match table (docs/configuration.md): every condition given must
// hold. A policy without a match table, or with an empty one, has All set.
// The policy package compiles it into the matcher the data path runs.
type Match struct {
	All        bool
	Hosts      []string // lower case, no trailing dot; "*.example.com" matches sub-domains
	Methods    []string
	Path       string // exact, when HasPath
	HasPath    bool
	PathPrefix string
	PathRegex  *regexp.Regexp // nil: none
	Headers    []HeaderMatch  // sorted by name
	// Claims are conditions on the claims of the request's verified
	// token ([identity]), sorted by path: each claim's single value
	// (identity's Claims.Get) must be Value exactly. A request whose
	// token is missing or invalid has no claims and matches none.
	Claims []ClaimMatch
	// RLSDomain, when not "", makes the policy one of Envoy's rate limit
	// service (docs/envoy.md): it matches a descriptor of that domain
	// whose entries Descriptor matches, one pattern per entry, and never
	// an HTTP request.
	RLSDomain  string
	Descriptor []DescriptorPattern
}

// DescriptorPattern is one element of a match table's descriptor: it
// matches a descriptor entry whose key is Key and whose value is Value
// (Exact), matches the wildcard pattern Value (Glob: each * stands for
// any run of characters, none included), or any value (neither).
type DescriptorPattern struct {
	Key, Value  string
	Exact, Glob bool
	// Star is set for a pattern of any value written "KEY=*" (or with
	// more '*' only), which lookup = "joined" takes as the reference's
	// wildcard KEY_* over the entry's KEY_VALUE, not its bare KEY.
	Star  bool
	parts []string // Value split at each *, with Glob
}

// Joined returns d as envoyproxy/ratelimit keys a descriptor in a level
// of its tree ([rls] lookup = "joined"): its KEY_VALUE, or KEY for a
// bare key ("KEY=*" is KEY_*); and, when that holds a '*' (a wildcard's
// value, "KEY=*", or a '*' the pattern escaped in its key or value, which
// the reference has no way to escape), that KEY_VALUE split at each '*'
// (nil otherwise), which the reference matches against an entry's
// KEY_VALUE.
func (d DescriptorPattern) Joined() (string, []string) {
	full := d.Key
	switch {
	case d.Star:
		full += "_*"
	case d.Exact || d.Glob:
		full += "_" + d.Value
	}
	if !strings.Contains(full, "*") {
		return full, nil
	}
	return full, strings.Split(full, "*")
}

// JoinedMatch reports whether s matches parts, a wildcard of Joined: as
// envoyproxy/ratelimit's wildcardMatch, each '*' any run of characters.
func JoinedMatch(parts []string, s string) bool { return globMatch(parts, s) }

// Matches reports whether the entry key=value matches d.
func (d DescriptorPattern) Matches(key, value string) bool {
	switch {
	case key != d.Key:
		return false
	case d.Exact:
		return value == d.Value
	case d.Glob:
		return globMatch(d.parts, value)
	}
	return true
}

// globMatch reports whether value matches parts, a pattern split at each
// * (at least two parts), as envoyproxy/ratelimit's wildcards do.
func globMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// String returns d as a descriptor array writes it: "KEY" or
// "KEY=VALUE" (with its wildcards), a literal '\\', '*' or (in the key)
// '=' escaped with '\\'.
func (d DescriptorPattern) String() string {
	key := escapePattern(d.Key, "\\*=")
	switch {
	case d.Exact:
		return key + "=" + escapePattern(d.Value, "\\*")
	case d.Glob:
		parts := make([]string, len(d.parts))
		for i, p := range d.parts {
			parts[i] = escapePattern(p, "\\*")
		}
		return key + "=" + strings.Join(parts, "*")
	case d.Star:
		return key + "=*"
	}
	return key
}

func escapePattern(s, special string) string {
	if !strings.ContainsAny(s, special) {
		return s
	}
	var b strings.Builder
	for i := range len(s) {
		if strings.IndexByte(special, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseDescriptorPattern parses "KEY", "KEY=VALUE" or "KEY=PATTERN" with
// wildcards (*). A '\\' makes the '*', '=' or '\\' after it literal: "\\*"
// is a value's '*' (not a wildcard), "a\\=b" the key "a=b"; a '\\' before
// any other character is itself.
func parseDescriptorPattern(s string) (DescriptorPattern, error) {
	// Split at the first '=' not escaped; unescape; split the value at
	// each '*' not escaped.
	var (
		key, cur strings.Builder
		parts    []string
		hasValue bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && strings.IndexByte("\\*=", s[i+1]) >= 0 {
			cur.WriteByte(s[i+1])
			i++
			continue
		}
		switch {
		case c == '=' && !hasValue:
			key.WriteString(cur.String())
			cur.Reset()
			hasValue = true
		case c == '*' && hasValue:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	if !hasValue {
		key.WriteString(cur.String())
	} else {
		parts = append(parts, cur.String())
	}
	k := key.String()
	if k == "" {
		return DescriptorPattern{}, fmt.Errorf("%q: the entry's key is empty (write \"KEY\", \"KEY=VALUE\" or, with * wildcards, \"KEY=/v1/*\")", s)
	}
	d := DescriptorPattern{Key: k}
	switch {
	case !hasValue:
		// "KEY": any value.
	case len(parts) > 1 && strings.Join(parts, "") == "":
		// "KEY=*": any value.
		d.Star = true
	case len(parts) > 1:
		d.Value, d.Glob, d.parts = strings.Join(parts, "*"), true, parts
	default:
		d.Value, d.Exact = parts[0], true
	}
	return d, nil
}

// RLS reports whether m is an RLS policy's (RLSDomain set).
func (m *Match) RLS() bool { return m.RLSDomain != "" }

// ClaimMatch is one condition of a match table's claims: the claim at
// Path (a claim path, "plan", "org.tier") is Value.
type ClaimMatch struct{ Path, Value string }

// HeaderMatch is one condition of a match table's headers.
type HeaderMatch struct {
	Name  string // canonical
	Value string
	Any   bool // "*": present with any value
}

// String describes m's conditions, e.g. "methods=[POST] path=/login".
func (m *Match) String() string {
	if m.All {
		return "all"
	}
	var parts []string
	if m.RLS() {
		parts = append(parts, "rls_domain="+m.RLSDomain)
		ds := make([]string, len(m.Descriptor))
		for i, d := range m.Descriptor {
			ds[i] = d.String()
		}
		parts = append(parts, fmt.Sprintf("descriptor=%q", ds))
	}
	if len(m.Hosts) > 0 {
		parts = append(parts, fmt.Sprintf("hosts=%v", m.Hosts))
	}
	if len(m.Methods) > 0 {
		parts = append(parts, fmt.Sprintf("methods=%v", m.Methods))
	}
	if m.HasPath {
		parts = append(parts, "path="+m.Path)
	}
	if m.PathPrefix != "" {
		parts = append(parts, "path_prefix="+m.PathPrefix)
	}
	if m.PathRegex != nil {
		parts = append(parts, "path_regex="+m.PathRegex.String())
	}
	for _, h := range m.Headers {
		parts = append(parts, fmt.Sprintf("header %s=%q", h.Name, h.Value))
	}
	for _, c := range m.Claims {
		parts = append(parts, fmt.Sprintf("claim %s=%q", c.Path, c.Value))
	}
	return strings.Join(parts, " ")
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

func sortHeaders(h []HeaderMatch) {
	sort.Slice(h, func(i, j int) bool { return h[i].Name < h[j].Name })
}

// validToken reports whether s is an HTTP token: one or more tchar, the
// characters RFC 9110 allows in a method, a field name or a protocol name.
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

// KeyKind is the kind of one part of a client key (docs/configuration.md).
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
	KeyDescriptor // descriptor:KEY, an RLS descriptor entry's value (docs/envoy.md)
	KeyJWT        // jwt:CLAIM, a claim of the request's verified token ([identity])
)

// KeyPart is one element of a policy's key list.
type KeyPart struct {
	Kind KeyKind
	Name string // for header (canonical), query and cookie
	// Nth, for a descriptor part written "descriptor:KEY#N", is N: the
	// part is the value of the Nth entry of KEY; 0: "descriptor:KEY",
	// whose nth part among a key's reads the nth entry of KEY.
	Nth int
}

// String returns the part as the key list writes it, e.g. "header:X-Api-Key".
func (k KeyPart) String() string {
	if int(k.Kind) >= len(keyKinds) || keyKinds[k.Kind].name == "" {
		return "?"
	}
	kk := &keyKinds[k.Kind]
	if kk.syntax == "" {
		return kk.name
	}
	if k.Nth > 0 {
		return kk.name + ":" + k.Name + "#" + strconv.Itoa(k.Nth)
	}
	return kk.name + ":" + k.Name
}

// ClientAddressHeaders are the request headers, besides X-Forwarded-For
// and Forwarded, in which proxies and CDNs commonly pass a client address
// and which upstream frameworks read (canonical names). The proxy
// rewrites a request's own to the client it was keyed by, so none of
// them, nor X-Forwarded-For, Forwarded or the configured client_ip_header,
// may be a header: key part: key by ip instead.
var ClientAddressHeaders = [...]string{
	"X-Real-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Client-Ip",
	"X-Cluster-Client-Ip", "Client-Ip", "X-Original-Forwarded-For", "X-Forwarded", "Forwarded-For",
	"X-Appengine-User-Ip", "X-Azure-Clientip",
}

// isClientAddressHeader reports whether name (canonical) is
// X-Forwarded-For, Forwarded or one of ClientAddressHeaders.
func isClientAddressHeader(name string) bool {
	if name == "X-Forwarded-For" || name == "Forwarded" {
		return true
	}
	for _, h := range ClientAddressHeaders {
		if h == name {
			return true
		}
	}
	return false
}

// errClientAddressKey explains why a client-address header is no key part.
const errClientAddressKey = "is a client-address header, which the proxy rewrites to the client on its way upstream, so a key on it would not be what the upstream reads: key by \"ip\" and name the header in [server] client_ip_header"

// parseKeyPart parses one element of a key list: a kind of keyKinds,
// with ":NAME" for the kinds that take one.
func parseKeyPart(s string) (KeyPart, error) {
	kind, name, named := strings.Cut(s, ":")
	for k := range keyKinds {
		kk := &keyKinds[k]
		if kk.name == "" || kk.name != kind || named != (kk.syntax != "") || named && name == "" {
			continue
		}
		if kk.check != nil {
			var err error
			if name, err = kk.check(name); err != nil {
				return KeyPart{}, fmt.Errorf("%q: %w", s, err)
			}
		}
		return KeyPart{Kind: KeyKind(k), Name: name}, nil
	}
	return KeyPart{}, fmt.Errorf("%q is not a key part (want %s)", s, keyPartSyntax)
}
