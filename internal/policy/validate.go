package policy

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/internal/limiter"
	"github.com/limitproxy/limitproxy/internal/limiter/redisstore"
)

// Config is a validated configuration file: SPEC §2 with defaults applied.
// It holds no live objects (see Compile). It is immutable once Parse
// returns it.
type Config struct {
	File      string // path it was read from
	Hash      string // SHA-256 of the file, hex
	Server    Server
	Admin     Admin
	Log       Log
	Store     Store
	Upstreams []Upstream
	Policies  []PolicySpec
}

// Server is [server].
type Server struct {
	Listen            string
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration
	MaxHeaderBytes    int
	TrustedProxies    []netip.Prefix // peers whose X-Forwarded-For / Forwarded are believed
	IPv6Prefix        int            // bits of an IPv6 client address that make its key
	RateLimitHeaders  string         // "draft" | "legacy" | "both" | "none"
	// UnderscoresInHeaders forwards request headers whose names hold an
	// underscore; by default they are dropped, as nginx does.
	UnderscoresInHeaders bool
	// ClientBodyTimeout is the time allowed between two reads of a
	// request body; SendTimeout between two writes of a response to the
	// client (nginx's client_body_timeout and send_timeout).
	ClientBodyTimeout, SendTimeout time.Duration
	TLS                            *TLS // nil: plain HTTP
}

// TLS is [server.tls].
type TLS struct {
	Mode                                                      string // "acme" | "files"
	Domains                                                   []string
	Email, CA, CARoot, Storage, HTTPListen, CertFile, KeyFile string
}

// Admin is [admin].
type Admin struct {
	Listen   string // "" disables the admin listener
	TokenEnv string
}

// Log is [log].
type Log struct {
	Level  string // debug | info | warn | error
	Format string // json | console
	Access bool
}

// Store is [store].
type Store struct {
	Backend string // "memory" | "redis"
	MaxKeys int
	Redis   Redis
}

// Redis is [store.redis].
type Redis struct {
	Addrs                             []string
	MasterName, Username, PasswordEnv string
	DB                                int
	TLS                               bool
	Timeout                           time.Duration
	Prefix, OnError                   string
}

// Upstream is one [[upstream]].
type Upstream struct {
	Name         string
	Targets      []*url.URL
	Timeout      time.Duration // to response headers
	PreserveHost bool
	MaxFails     int
	FailTimeout  time.Duration
	// Upgrades are the protocols (lower case) a client may upgrade to
	// through this upstream; any other Upgrade is removed from the
	// forwarded request. Default ["websocket"].
	Upgrades []string
	// AllowTrace lets TRACE requests through; otherwise they get 405.
	AllowTrace bool
	// Buffering reads a request's whole body before an upstream
	// connection is taken (nginx's proxy_request_buffering).
	Buffering bool
	// MaxBodyBytes is the largest request body forwarded; larger ones get
	// 413.
	MaxBodyBytes int64
}

// Mode is a policy's mode.
type Mode string

// The modes.
const (
	Enforce Mode = "enforce"
	Shadow  Mode = "shadow" // decide and count, never reject or delay
)

// OnMissing says what a policy does with a request that lacks a key part.
type OnMissing string

// The on_missing behaviours (SPEC §2).
const (
	MissingShared OnMissing = "shared" // the absent part is one shared value
	MissingIP     OnMissing = "ip"     // key the request by its client IP instead
	MissingSkip   OnMissing = "skip"   // forward without limiting, as nginx does for an empty key
	MissingReject OnMissing = "reject" // answer 400
)

// PolicySpec is one validated [[policy]], not yet bound to a store.
type PolicySpec struct {
	Name      string
	Index     int // position in the file
	Upstream  string
	Mode      Mode
	Key       []KeyPart
	OnMissing OnMissing
	Match     Matcher
	Limits    []limiter.Limit
	Reject    Reject
}

// Reject is [policy.reject]: what a rejected request gets.
type Reject struct {
	Status      int
	Body        string // "" means the problem+json body of SPEC §5
	ContentType string
}

// Defaults of SPEC §2 and of what SPEC leaves open (README "Configuration").
const (
	DefaultListen            = ":8080"
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultIPv6Prefix        = 64
	DefaultAdminListen       = "127.0.0.1:9091"
	DefaultMaxKeys           = 1_000_000
	DefaultUpstreamTimeout   = 30 * time.Second
	DefaultMaxFails          = 3
	DefaultFailTimeout       = 10 * time.Second
	DefaultRedisTimeout      = 50 * time.Millisecond
	DefaultClientBodyTimeout = 60 * time.Second // nginx's
	DefaultSendTimeout       = 60 * time.Second // nginx's
	DefaultMaxBodyBytes      = 16 << 20         // nginx's is 1 MiB; APIs upload more
)

// envName is what an environment variable's name may be.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// nameRE is what a policy name may be: it is quoted in RateLimit headers
// (a Structured Field string) and used as a metric label.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func oneOf(c *collector, key, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	c.add(key, "%q is not one of %s", v, strings.Join(quoteAll(allowed), ", "))
}

func quoteAll(s []string) []string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return q
}

// validate applies defaults and checks everything that involves more than
// one value. Errors go to c; the Config is meaningful only if there are none.
func validate(raw *rawFile, c *collector) *Config {
	cfg := &Config{}
	s := &raw.Server
	cfg.Server = Server{
		Listen:               s.Listen.Or(DefaultListen),
		ReadHeaderTimeout:    s.ReadHeaderTimeout.Or(DefaultReadHeaderTimeout),
		IdleTimeout:          s.IdleTimeout.Or(DefaultIdleTimeout),
		ShutdownTimeout:      s.ShutdownTimeout.Or(DefaultShutdownTimeout),
		MaxHeaderBytes:       int(s.MaxHeaderBytes.Or(DefaultMaxHeaderBytes)),
		TrustedProxies:       s.TrustedProxies.V,
		IPv6Prefix:           int(s.IPv6Prefix.Or(DefaultIPv6Prefix)),
		RateLimitHeaders:     s.RateLimitHeaders.Or("draft"),
		UnderscoresInHeaders: s.Underscores.V,
		ClientBodyTimeout:    s.ClientBodyTimeout.Or(DefaultClientBodyTimeout),
		SendTimeout:          s.SendTimeout.Or(DefaultSendTimeout),
	}
	if cfg.Server.ClientBodyTimeout <= 0 && s.ClientBodyTimeout.err == nil {
		c.add("server.client_body_timeout", "must be greater than zero")
	}
	if cfg.Server.SendTimeout <= 0 && s.SendTimeout.err == nil {
		c.add("server.send_timeout", "must be greater than zero")
	}
	if cfg.Server.Listen == "" {
		c.add("server.listen", "must not be empty")
	}
	if n := s.MaxHeaderBytes.V; s.MaxHeaderBytes.Set && s.MaxHeaderBytes.err == nil && (n < 1024 || n > 16<<20) {
		c.add("server.max_header_bytes", "%d is outside 1024..16777216", n)
	}
	if n := s.IPv6Prefix.V; s.IPv6Prefix.Set && s.IPv6Prefix.err == nil && (n < 1 || n > 128) {
		c.add("server.ipv6_prefix", "%d is outside 1..128", n)
	}
	oneOf(c, "server.rate_limit_headers", cfg.Server.RateLimitHeaders, "draft", "legacy", "both", "none")
	if t := s.TLS; t != nil {
		cfg.Server.TLS = &TLS{
			Mode: t.Mode.V, Domains: t.Domains.V, Email: t.Email.V,
			CA: t.CA.Or("https://acme-v02.api.letsencrypt.org/directory"), CARoot: t.CARoot.V,
			Storage: t.Storage.Or("./certs"), HTTPListen: t.HTTPListen.Or(":80"),
			CertFile: t.CertFile.V, KeyFile: t.KeyFile.V,
		}
		oneOf(c, "server.tls.mode", t.Mode.V, "acme", "files")
		switch t.Mode.V {
		case "files":
			if t.CertFile.V == "" {
				c.add("server.tls.cert_file", "is required when mode = \"files\"")
			}
			if t.KeyFile.V == "" {
				c.add("server.tls.key_file", "is required when mode = \"files\"")
			}
			if !t.HTTPListen.Set {
				cfg.Server.TLS.HTTPListen = "" // no redirect listener unless asked for
			}
		case "acme":
			if len(t.Domains.V) == 0 {
				c.add("server.tls.domains", "at least one domain is required when mode = \"acme\"")
			}
		}
	}

	cfg.Admin = Admin{Listen: raw.Admin.Listen.Or(DefaultAdminListen), TokenEnv: raw.Admin.TokenEnv.V}
	cfg.Log = Log{Level: raw.Log.Level.Or("info"), Format: raw.Log.Format.Or("json"), Access: raw.Log.Access.Or(true)}
	oneOf(c, "log.level", cfg.Log.Level, "debug", "info", "warn", "error")
	oneOf(c, "log.format", cfg.Log.Format, "json", "console")

	st := &raw.Store
	cfg.Store = Store{Backend: st.Backend.Or("memory"), MaxKeys: int(st.MaxKeys.Or(DefaultMaxKeys))}
	oneOf(c, "store.backend", cfg.Store.Backend, "memory", "redis")
	if st.MaxKeys.Set && st.MaxKeys.err == nil && st.MaxKeys.V < 1 {
		c.add("store.max_keys", "must be at least 1")
	}
	r := &st.Redis
	cfg.Store.Redis = Redis{
		Addrs: r.Addrs.V, MasterName: r.MasterName.V, Username: r.Username.V, PasswordEnv: r.PasswordEnv.V,
		DB: int(r.DB.V), TLS: r.TLS.V, Timeout: r.Timeout.Or(DefaultRedisTimeout),
		Prefix: r.Prefix.Or("limitproxy:"), OnError: r.OnError.Or("local"),
	}
	if !r.Addrs.Set {
		cfg.Store.Redis.Addrs = []string{"127.0.0.1:6379"}
	}
	oneOf(c, "store.redis.on_error", cfg.Store.Redis.OnError, "local", "allow", "deny")
	if cfg.Store.Backend == "redis" {
		rc := &cfg.Store.Redis
		if len(rc.Addrs) == 0 && r.Addrs.err == nil {
			c.add("store.redis.addrs", "at least one address is required")
		}
		if rc.Timeout <= 0 && r.Timeout.err == nil {
			c.add("store.redis.timeout", "must be greater than zero")
		}
		switch {
		case rc.DB < 0:
			c.add("store.redis.db", "%d: a database number is 0 or more", rc.DB)
		case rc.DB > 0 && len(rc.Addrs) > 1 && rc.MasterName == "":
			c.add("store.redis.db", "%d: Redis Cluster (several addrs) has only database 0", rc.DB)
		}
		if rc.PasswordEnv != "" && !envName.MatchString(rc.PasswordEnv) {
			c.add("store.redis.password_env", "%q is not an environment variable name (the password itself never goes in the file)", rc.PasswordEnv)
		}
	}

	upstreams := map[string]int{}
	for i, u := range raw.Upstream {
		key := fmt.Sprintf("upstream[%d]", i)
		up := Upstream{
			Name: u.Name.V, Timeout: u.Timeout.Or(DefaultUpstreamTimeout), PreserveHost: u.PreserveHost.V,
			MaxFails: int(u.MaxFails.Or(DefaultMaxFails)), FailTimeout: u.FailTimeout.Or(DefaultFailTimeout),
		}
		switch prev, dup := upstreams[up.Name]; {
		case up.Name == "":
			c.add(key+".name", "is required")
		case dup:
			c.add(key+".name", "upstream %q duplicates upstream[%d]", up.Name, prev)
		default:
			upstreams[up.Name] = i
		}
		if len(u.Targets.V) == 0 && u.Targets.err == nil {
			c.add(key+".targets", "at least one target URL is required")
		}
		for j, t := range u.Targets.V {
			target, err := url.Parse(t)
			if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
				c.add(fmt.Sprintf("%s.targets", key), "element %d: %q is not an http:// or https:// URL with a host", j, t)
				continue
			}
			up.Targets = append(up.Targets, target)
		}
		if up.Timeout <= 0 && u.Timeout.Set {
			c.add(key+".timeout", "must be greater than zero")
		}
		up.Upgrades, up.AllowTrace = []string{"websocket"}, u.AllowTrace.V
		up.Buffering, up.MaxBodyBytes = u.Buffering.Or(true), u.MaxBodyBytes.Or(DefaultMaxBodyBytes)
		if u.MaxBodyBytes.Set && u.MaxBodyBytes.err == nil && up.MaxBodyBytes < 1 {
			c.add(key+".max_body_bytes", "must be at least 1")
		}
		if u.Upgrades.Set {
			up.Upgrades = nil
			for j, proto := range u.Upgrades.V {
				if !validToken(strings.SplitN(proto, "/", 2)[0]) || strings.Count(proto, "/") > 1 {
					c.add(key+".upgrades", "element %d: %q is not a protocol name (RFC 9110 §7.8), such as \"websocket\"", j, proto)
					continue
				}
				up.Upgrades = append(up.Upgrades, strings.ToLower(proto))
			}
		}
		if u.MaxFails.Set && u.MaxFails.V < 0 {
			c.add(key+".max_fails", "must not be negative (0 turns passive health checks off)")
		}
		cfg.Upstreams = append(cfg.Upstreams, up)
	}

	names := map[string]int{}
	catchAll := -1
	for i, p := range raw.Policy {
		key := fmt.Sprintf("policy[%d]", i)
		spec := PolicySpec{
			Name: p.Name.V, Index: i, Upstream: p.Upstream.V,
			Mode: Mode(p.Mode.Or(string(Enforce))), OnMissing: OnMissing(p.OnMissing.Or(string(MissingShared))),
		}
		switch prev, dup := names[spec.Name]; {
		case spec.Name == "":
			c.add(key+".name", "is required")
		case !nameRE.MatchString(spec.Name):
			c.add(key+".name", "%q: use letters, digits, '.', '_' and '-' (it appears in headers, metrics and logs)", spec.Name)
		case dup:
			c.add(key+".name", "policy %q duplicates policy[%d]", spec.Name, prev)
		default:
			names[spec.Name] = i
		}
		switch _, ok := upstreams[spec.Upstream]; {
		case spec.Upstream == "":
			c.add(key+".upstream", "is required")
		case !ok:
			c.add(key+".upstream", "unknown upstream %q", spec.Upstream)
		}
		oneOf(c, key+".mode", string(spec.Mode), string(Enforce), string(Shadow))
		oneOf(c, key+".on_missing", string(spec.OnMissing), string(MissingShared), string(MissingIP), string(MissingSkip), string(MissingReject))
		keyParts := []string{"ip"}
		if p.Key.Set {
			keyParts = p.Key.V
		}
		for j, part := range keyParts {
			kp, err := ParseKeyPart(part)
			if err != nil {
				c.add(key+".key", "element %d: %v", j, err)
				continue
			}
			spec.Key = append(spec.Key, kp)
		}
		spec.Match = compileMatch(p.Match, key+".match", c)
		if catchAll >= 0 {
			c.add(key, "policy %q can never match: policy[%d] %q before it matches every request", spec.Name, catchAll, raw.Policy[catchAll].Name.V)
		} else if spec.Match.all {
			catchAll = i
		}
		spec.Limits = compileLimits(p.Limits, key, c)
		if cfg.Store.Backend == "redis" {
			for j, l := range spec.Limits {
				if err := redisstore.Check(l); err != nil {
					c.add(fmt.Sprintf("%s.limits[%d]", key, j), "%v", err)
				}
			}
		}
		spec.Reject = Reject{Status: 429, ContentType: "application/problem+json"}
		if rj := p.Reject; rj != nil {
			spec.Reject.Status = int(rj.Status.Or(429))
			if spec.Reject.Status < 400 || spec.Reject.Status > 599 {
				c.add(key+".reject.status", "%d is not an HTTP error status (400..599)", spec.Reject.Status)
			}
			spec.Reject.Body = rj.Body.V
			if rj.Body.Set {
				spec.Reject.ContentType = rj.ContentType.Or("text/plain; charset=utf-8")
			} else if rj.ContentType.Set {
				c.add(key+".reject.content_type", "is set but body is not")
			}
		}
		cfg.Policies = append(cfg.Policies, spec)
	}
	if len(raw.Policy) == 0 {
		c.add("policy", "at least one [[policy]] is required")
	}
	return cfg
}

// compileLimits validates a policy's [[policy.limits]] through the limiter's
// constructors, after checking that each sets only what its algorithm takes.
func compileLimits(raws []rawLimit, policyKey string, c *collector) []limiter.Limit {
	if len(raws) == 0 {
		c.add(policyKey+".limits", "at least one [[policy.limits]] is required")
		return nil
	}
	if len(raws) > limiter.MaxLimits {
		c.add(policyKey+".limits", "%d limits; at most %d per policy", len(raws), limiter.MaxLimits)
	}
	var out []limiter.Limit
	leaky := -1
	for i, r := range raws {
		key := fmt.Sprintf("%s.limits[%d]", policyKey, i)
		if !r.Algorithm.Set {
			c.add(key+".algorithm", "is required")
			continue
		}
		alg, err := limiter.ParseAlgorithm(r.Algorithm.V)
		if err != nil {
			c.add(key+".algorithm", "%v", err)
			continue
		}
		takes := map[limiter.Algorithm][]string{
			limiter.TokenBucket:   {"rate", "burst", "cost"},
			limiter.LeakyBucket:   {"rate", "queue", "max_wait", "cost"},
			limiter.FixedWindow:   {"limit", "window", "cost"},
			limiter.SlidingLog:    {"limit", "window", "cost"},
			limiter.SlidingWindow: {"limit", "window", "slots", "cost"},
		}[alg]
		present := map[string]bool{
			"rate": r.Rate.Set, "burst": r.Burst.Set, "limit": r.Limit.Set, "window": r.Window.Set,
			"slots": r.Slots.Set, "queue": r.Queue.Set, "max_wait": r.MaxWait.Set, "cost": r.Cost.Set,
		}
		bad := false
		for _, field := range []string{"rate", "burst", "limit", "window", "slots", "queue", "max_wait"} {
			if present[field] && !contains(takes, field) {
				c.add(key+"."+field, "is not a parameter of %s (it takes %s)", alg, strings.Join(takes, ", "))
				bad = true
			}
		}
		var required []string
		switch alg {
		case limiter.TokenBucket, limiter.LeakyBucket:
			required = []string{"rate"}
		default:
			required = []string{"limit", "window"}
		}
		for _, field := range required {
			if !present[field] {
				c.add(key+"."+field, "is required for %s", alg)
				bad = true
			}
		}
		if r.Cost.Set && r.Cost.err == nil && r.Cost.V < 1 {
			// Absent means 1; a cost written as 0 would make the limit
			// admit everything, and a negative one would refill it.
			c.add(key+".cost", "%d: must be at least 1", r.Cost.V)
			bad = true
		}
		if bad || valueErrors(&r) {
			continue
		}
		var lim limiter.Limit
		switch alg {
		case limiter.TokenBucket:
			// Default burst: one period's worth of the rate ("10/s" → 10).
			lim, err = limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: r.Rate.Rate, Burst: r.Burst.Or(r.Rate.N), Cost: r.Cost.V})
		case limiter.LeakyBucket:
			p := limiter.LeakyBucketParams{Rate: r.Rate.Rate, Queue: r.Queue.V, Cost: r.Cost.V}
			// Default max_wait: the time the full queue takes to drain, so
			// that only queue bounds the wait.
			p.MaxWait = r.MaxWait.Or(time.Duration(int64(r.Rate.Per) / r.Rate.N * (p.Queue + 1)))
			lim, err = limiter.NewLeakyBucket(p)
			if leaky >= 0 {
				c.add(key+".algorithm", "a policy may have one leaky_bucket (a request waits in one queue); limits[%d] is one already", leaky)
			}
			leaky = i
		case limiter.FixedWindow:
			lim, err = limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: r.Limit.V, Window: r.Window.D, Cost: r.Cost.V})
		case limiter.SlidingLog:
			lim, err = limiter.NewSlidingLog(limiter.SlidingLogParams{Limit: r.Limit.V, Window: r.Window.D, Cost: r.Cost.V})
		case limiter.SlidingWindow:
			lim, err = limiter.NewSlidingWindow(limiter.SlidingWindowParams{Limit: r.Limit.V, Window: r.Window.D, Slots: int(r.Slots.Or(1)), Cost: r.Cost.V})
		}
		if err != nil {
			if pe, ok := err.(*limiter.ParamError); ok {
				c.add(key+"."+pe.Field, "%s", pe.Msg)
			} else {
				c.add(key, "%v", err)
			}
			continue
		}
		out = append(out, lim)
	}
	return out
}

// valueErrors reports whether any value of a limit failed to decode (those
// errors are reported already).
func valueErrors(r *rawLimit) bool {
	return r.Algorithm.err != nil || r.Rate.err != nil || r.Burst.err != nil || r.Limit.err != nil ||
		r.Window.err != nil || r.Slots.err != nil || r.Queue.err != nil || r.MaxWait.err != nil || r.Cost.err != nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// compileMatch validates a match table. A policy without one, or with an
// empty one, matches every request.
func compileMatch(m *rawMatch, key string, c *collector) Matcher {
	if m == nil {
		return Matcher{all: true}
	}
	var mt Matcher
	for i, h := range m.Hosts.V {
		// As requests' hosts are compared: lower case, without the
		// trailing dot of a fully qualified name.
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if h == "" || strings.Contains(h[1:], "*") || (strings.HasPrefix(h, "*") && !strings.HasPrefix(h, "*.")) {
			c.add(key+".hosts", "element %d: %q is not a host name or a wildcard such as \"*.example.com\"", i, h)
			continue
		}
		mt.hosts = append(mt.hosts, h)
	}
	for i, meth := range m.Methods.V {
		if meth == "" || strings.ToUpper(meth) != meth || strings.ContainsAny(meth, " \t/") {
			c.add(key+".methods", "element %d: %q is not an HTTP method in upper case", i, meth)
			continue
		}
		mt.methods = append(mt.methods, meth)
	}
	if m.Path.Set {
		if !strings.HasPrefix(m.Path.V, "/") {
			c.add(key+".path", "%q must start with /", m.Path.V)
		}
		mt.path, mt.hasPath = m.Path.V, true
	}
	if m.PathPrefix.Set {
		if !strings.HasPrefix(m.PathPrefix.V, "/") {
			c.add(key+".path_prefix", "%q must start with /", m.PathPrefix.V)
		}
		mt.prefix = m.PathPrefix.V
	}
	if m.PathRegex.Set {
		re, err := regexp.Compile(m.PathRegex.V)
		if err != nil {
			c.add(key+".path_regex", "%q is not a valid RE2 expression: %v", m.PathRegex.V, err)
		}
		mt.re = re
	}
	for name, v := range m.Headers {
		if !validToken(name) {
			c.add(key+".headers."+name, "%q is not a header name", name)
			continue
		}
		mt.headers = append(mt.headers, headerMatch{name: canonicalHeader(name), value: v.V, any: v.V == "*"})
	}
	sortHeaders(mt.headers)
	mt.all = len(mt.hosts) == 0 && len(mt.methods) == 0 && !mt.hasPath && mt.prefix == "" && mt.re == nil && len(mt.headers) == 0
	return mt
}
