package config

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// envName is what an environment variable's name may be.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// nameRE is what a policy name may be: it is quoted in RateLimit headers
// (a Structured Field string) and used as a metric label.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// The values of each enumerated key, and the parameters each algorithm
// takes and requires: what the validator accepts, and what the JSON Schema
// of the configuration (config.schema.json, generated from these) lists.
var (
	topKeysValues     = []string{"hashed", "raw"}
	headersModes      = []HeadersMode{HeadersDraft, HeadersLegacy, HeadersBoth, HeadersNone}
	ambiguousModes    = []AmbiguousMode{AmbiguousReject, AmbiguousRewrite}
	tlsModes          = []TLSMode{TLSACME, TLSFiles}
	logLevels         = []LogLevel{LevelDebug, LevelInfo, LevelWarn, LevelError}
	logFormats        = []LogFormat{FormatJSON, FormatConsole}
	clientAddresses   = []ClientAddress{ClientFull, ClientMasked, ClientHashed}
	backends          = []Backend{BackendMemory, BackendRedis}
	onErrors          = []OnError{OnErrorLocal, OnErrorAllow, OnErrorDeny}
	upstreamProtocols = []UpstreamProtocol{ProtocolHTTP1, ProtocolH2C}
	implementations   = []Implementation{ImplLimitproxy, ImplNetHTTP}
	modes             = []Mode{Enforce, Shadow}
	compatibilities   = []Compatibility{CompatNone, CompatEnvoy}
	countKeys         = []CountKeys{CountKeysDistinct, CountKeysJoined}
	lookups           = []Lookup{LookupDistinct, LookupJoined}
	rlsHeaders        = []RLSHeaders{RLSHeadersRateLimit, RLSHeadersEnvoy, RLSHeadersNone}
	onMissings        = []OnMissing{MissingShared, MissingIP, MissingSkip, MissingReject, MissingUnauthorized}
)

// oneOf reports v at key unless it is one of allowed.
func oneOf[T ~string](c *collector, key string, v T, allowed ...T) {
	q := make([]string, len(allowed))
	for i, a := range allowed {
		if v == a {
			return
		}
		q[i] = strconv.Quote(string(a))
	}
	c.add(key, "%q is not one of %s", v, strings.Join(q, ", "))
}

// validate applies defaults and checks everything that involves more than
// one value, section by section. Errors go to c; the Config is meaningful
// only if there are none.
func validate(raw *rawFile, c *collector, o Options) *Config {
	cfg := &Config{
		Server:      validateServer(&raw.Server, c),
		Admin:       validateAdmin(&raw.Admin, c),
		ForwardAuth: validateForwardAuth(&raw.FwdAuth, c),
		Log:         validateLog(&raw.Log, c),
		Store:       validateStore(&raw.Store, c),
		RLS:         validateRLS(&raw.RLS, c),
		RLQS:        validateRLQS(&raw.RLQS, c),
		Identity:    validateIdentity(raw.Identity, c),
	}
	upstreams := map[string]int{}
	for i := range raw.Upstream {
		cfg.Upstreams = append(cfg.Upstreams, validateUpstream(&raw.Upstream[i], fmt.Sprintf("upstream[%d]", i), upstreams, i, c))
	}
	if cfg.Log.AccessReplay == ReplayHashed && cfg.Admin.KeyHashSecretEnv == "" {
		c.add("log.access_replay", `"hashed" hashes what the keys read under the key hash secret: set admin.key_hash_secret_env (a secret drawn at each start would hash a value otherwise after a restart, and a replay would count it as another key's)`)
	}
	resolveUnmatched(&cfg.Server, cfg.Upstreams, upstreams, c)
	check := o.StoreChecks[cfg.Store.Backend]
	shared := validateShared(raw.Shared, check, c)
	cfg.Policies = validatePolicies(raw.Policy, upstreams, shared, check, c)
	for i := range cfg.Policies {
		if cfg.Policies[i].Match.RLS() {
			checkRLSPolicy(&cfg.Policies[i], &raw.Policy[i], c)
			continue
		}
		checkHTTPPolicyKeys(&cfg.Policies[i], c)
		refuseRLSKeys(&raw.Policy[i], i, c)
		checkIdentityUse(&cfg.Policies[i], cfg.Identity != nil, c)
		resolveClass(&cfg.Policies[i], &raw.Policy[i], cfg.Upstreams, upstreams, c)
		checkClientHeaderKey(&cfg.Policies[i], cfg.Server.ClientIPHeader, c)
	}
	if r := cfg.Store.Redis; cfg.Store.Backend == BackendRedis && len(r.Addrs) > 1 && r.MasterName == "" {
		// Redis Cluster decides a request with one script call, whose keys
		// must share a hash slot: one client key per policy.
		for i, p := range cfg.Policies {
			for j, lk := range p.LimitKeys {
				if !lk.Equal(p.LimitKeys[0]) {
					c.add(fmt.Sprintf("policy[%d].limits[%d]", i, j), "counts under key %s, limits[0] under %s: on Redis Cluster (several store.redis.addrs) the limits of one policy must share one key", lk, p.LimitKeys[0])
					break
				}
			}
		}
	}
	return cfg
}

// resolveUnmatched checks [server] unmatched_upstream against the
// upstreams (by index in ups) and, with unmatched = "forward" and none
// named, takes the only upstream there is.
func resolveUnmatched(s *Server, upstreams []Upstream, ups map[string]int, c *collector) {
	switch {
	case s.Unmatched != UnmatchedForward:
		s.UnmatchedUpstream = ""
	case s.UnmatchedUpstream != "":
		if _, ok := ups[s.UnmatchedUpstream]; !ok {
			c.add("server.unmatched_upstream", "unknown upstream %q", s.UnmatchedUpstream)
		}
	case len(upstreams) == 1:
		s.UnmatchedUpstream = upstreams[0].Name
	}
}

// validateAdmin checks [admin].
func validateAdmin(a *rawAdmin, c *collector) Admin {
	adm := Admin{Listen: a.Listen.Or(DefaultAdminListen), TokenEnv: a.TokenEnv.V, RawTopKeys: a.TopKeys.V == "raw", KeyHashSecretEnv: a.HashEnv.V}
	oneOf(c, "admin.top_keys", a.TopKeys.Or("hashed"), topKeysValues...)
	if adm.KeyHashSecretEnv != "" && !envName.MatchString(adm.KeyHashSecretEnv) {
		c.add("admin.key_hash_secret_env", "%q is not an environment variable name (the secret itself never goes in the file)", adm.KeyHashSecretEnv)
	}
	for i, h := range a.Hosts.V {
		n, err := AdminHost(h)
		if err != nil {
			c.add("admin.allowed_hosts", "element %d: %v", i, err)
			continue
		}
		adm.AllowedHosts = append(adm.AllowedHosts, n)
	}
	return adm
}

// validateForwardAuth checks [forward_auth].
func validateForwardAuth(f *rawForwardAuth, c *collector) ForwardAuth {
	fa := ForwardAuth{
		Listen:         f.Listen.V,
		TrustedSenders: f.Senders.V,
		DenyStatus:     int(f.DenyStatus.V),
		MaxWait:        f.MaxWait.Or(DefaultForwardAuthMaxWait),
	}
	if f.DenyStatus.Set && f.DenyStatus.err == nil {
		switch fa.DenyStatus {
		case http.StatusUnauthorized, http.StatusForbidden:
		default:
			c.add("forward_auth.deny_status", "%d: give 401 or 403 (the only refusals nginx's auth_request passes), or leave it out for the policy's own status", fa.DenyStatus)
		}
	}
	if fa.Listen != "" && len(fa.TrustedSenders) == 0 && f.Senders.err == nil {
		c.add("forward_auth.listen", "requires trusted_senders: the original request is read only from the proxies listed there (nginx, Traefik, Caddy), never from anyone else")
	}
	return fa
}

// AdminHost checks one [admin] allowed_hosts entry, a host name with or
// without a port as a request's Host gives it ("admin.internal",
// "admin.internal:9091"), and returns it in lower case without a trailing
// dot. An IP address is allowed too (any address is always accepted).
func AdminHost(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%q %s (give a name as a request's Host does: \"admin.internal\" or \"admin.internal:9091\")", s, why)
	}
	switch {
	case s == "":
		return bad("is empty")
	case strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@"):
		return bad("is a URL, not a host")
	case strings.Contains(s, "*"):
		return bad("is a wildcard: each name must be listed")
	}
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
			return bad("has a port that is not 1-65535")
		}
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Is6() && !strings.HasPrefix(s, "[") {
			return bad("is an IPv6 address without brackets")
		}
		return strings.ToLower(s), nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if !hostNameRE.MatchString(name) || len(name) > 253 {
		return bad("is not a host name")
	}
	if port != "" {
		return name + ":" + port, nil
	}
	return name, nil
}

// hostNameRE is a DNS name: dot-separated labels of letters, digits and
// hyphens, 1 to 63 characters, not beginning or ending with a hyphen
// (underscores are accepted, as resolvers do).
var hostNameRE = regexp.MustCompile(`^([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$`)

// validateServer checks [server] and [server.tls].
func validateServer(s *rawServer, c *collector) Server {
	srv := Server{
		Listen:               s.Listen.Or(DefaultListen),
		ReadHeaderTimeout:    s.ReadHeaderTimeout.Or(DefaultReadHeaderTimeout),
		IdleTimeout:          s.IdleTimeout.Or(DefaultIdleTimeout),
		ShutdownTimeout:      s.ShutdownTimeout.Or(DefaultShutdownTimeout),
		MaxHeaderBytes:       int(s.MaxHeaderBytes.Or(DefaultMaxHeaderBytes)),
		MaxConnections:       int(s.MaxConnections.Or(0)),
		TrustedProxies:       s.TrustedProxies.V,
		ClientIPHeader:       http.CanonicalHeaderKey(s.ClientIPHeader.Or(DefaultClientIPHeader)),
		TrustedHops:          int(s.TrustedHops.V),
		ProxyProtocolFrom:    s.ProxyProtocolFrom.V,
		IPv6Prefix:           int(s.IPv6Prefix.Or(DefaultIPv6Prefix)),
		RateLimitHeaders:     HeadersMode(s.RateLimitHeaders.Or(string(DefaultRateLimitHeaders))),
		AmbiguousKeyParts:    AmbiguousMode(s.AmbiguousKeyParts.Or(string(DefaultAmbiguousKeyParts))),
		UnderscoresInHeaders: s.Underscores.V,
		CaseSensitivePaths:   s.CaseSensitive.V,
		ClientBodyTimeout:    s.ClientBodyTimeout.Or(DefaultClientBodyTimeout),
		SendTimeout:          s.SendTimeout.Or(DefaultSendTimeout),
		TempDir:              s.TempDir.Or(os.TempDir()),
		ResponseBufferBudget: s.RespBudget.Or(DefaultResponseBufferBudget),
		ResponseBufferDisk:   s.RespDisk.Or(DefaultResponseBufferDisk),
		ProxyProtocol:        s.ProxyProtocol.V,
		HTTP1:                Implementation(s.HTTP1.Or(string(DefaultHTTP1))),
		H2C:                  s.H2C.V,
		Unmatched:            Unmatched(s.Unmatched.Or(string(DefaultUnmatched))),
		UnmatchedUpstream:    s.UnmatchedUpstream.V,
	}
	if !s.ProxyProtocolFrom.Set {
		srv.ProxyProtocolFrom = srv.TrustedProxies
	}
	switch {
	case s.ProxyProtocolFrom.Set && !srv.ProxyProtocol && s.ProxyProtocolFrom.err == nil:
		c.add("server.proxy_protocol_from", "is set but proxy_protocol is not true")
	case srv.ProxyProtocol && len(srv.ProxyProtocolFrom) == 0 && s.ProxyProtocolFrom.Set && s.ProxyProtocolFrom.err == nil:
		c.add("server.proxy_protocol_from", "is empty: no peer could send a PROXY header")
	case srv.ProxyProtocol && len(srv.ProxyProtocolFrom) == 0 && s.ProxyProtocolFrom.err == nil && s.TrustedProxies.err == nil:
		// Only the listed peers may send a PROXY header: with none, no
		// connection could use it.
		c.add("server.proxy_protocol", "requires proxy_protocol_from (or trusted_proxies, its default): only peers listed there may send a PROXY header")
	}
	if h := s.ClientIPHeader; h.Set && h.err == nil {
		switch {
		case !validHeaderName(h.V):
			c.add("server.client_ip_header", "%q is not a header name", h.V)
		case strings.Contains(h.V, "_") && !s.Underscores.V:
			c.add("server.client_ip_header", "%q holds an underscore: such headers are dropped unless underscores_in_headers = true", h.V)
		case hopByHop(h.V):
			c.add("server.client_ip_header", "%q is a hop-by-hop or framing header, never a client address", h.V)
		}
	}
	if n := s.TrustedHops.V; s.TrustedHops.Set && s.TrustedHops.err == nil {
		switch {
		case n < 0 || n > MaxTrustedHops:
			c.add("server.trusted_hops", "%d is outside 0..%d", n, MaxTrustedHops)
		case n > 0 && len(srv.TrustedProxies) == 0 && s.TrustedProxies.err == nil:
			c.add("server.trusted_hops", "requires trusted_proxies: the header is read only from the peers listed there (for balancers whose addresses are not known, their network)")
		}
	}
	if srv.ClientBodyTimeout <= 0 && s.ClientBodyTimeout.err == nil {
		c.add("server.client_body_timeout", "must be greater than zero")
	}
	if srv.SendTimeout <= 0 && s.SendTimeout.err == nil {
		c.add("server.send_timeout", "must be greater than zero")
	}
	if srv.Listen == "" {
		c.add("server.listen", "must not be empty")
	}
	if s.TempDir.Set && s.TempDir.err == nil && !filepath.IsAbs(srv.TempDir) {
		c.add("server.temp_dir", "%q is not an absolute path", srv.TempDir)
	}
	if s.RespBudget.Set && s.RespBudget.err == nil && srv.ResponseBufferBudget < 0 {
		c.add("server.response_buffer_budget", "must not be negative (0 keeps every buffered answer on disk)")
	}
	if s.RespDisk.Set && s.RespDisk.err == nil && srv.ResponseBufferDisk < 0 {
		c.add("server.response_buffer_disk", "must not be negative (0: no buffered answer goes to disk)")
	}
	if n := s.MaxHeaderBytes.V; s.MaxHeaderBytes.Set && s.MaxHeaderBytes.err == nil && (n < 1024 || n > 16<<20) {
		c.add("server.max_header_bytes", "%d is outside 1024..16777216", n)
	}
	if n := s.MaxConnections.V; s.MaxConnections.Set && s.MaxConnections.err == nil && (n < 0 || n > 1<<30) {
		c.add("server.max_connections", "%d is outside 0..1073741824 (0: derived from the file-descriptor limit)", n)
	}
	if n := s.IPv6Prefix.V; s.IPv6Prefix.Set && s.IPv6Prefix.err == nil && (n < 1 || n > 128) {
		c.add("server.ipv6_prefix", "%d is outside 1..128", n)
	}
	oneOf(c, "server.rate_limit_headers", srv.RateLimitHeaders, headersModes...)
	oneOf(c, "server.ambiguous_key_parts", srv.AmbiguousKeyParts, ambiguousModes...)
	oneOf(c, "server.http1", srv.HTTP1, implementations...)
	oneOf(c, "server.unmatched", srv.Unmatched, UnmatchedForward, UnmatchedRefuse)
	if srv.Unmatched == UnmatchedRefuse && srv.UnmatchedUpstream != "" {
		c.add("server.unmatched_upstream", `names where unmatched requests go, but server.unmatched = "refuse" answers them 404`)
	}
	if t := s.TLS; t != nil {
		srv.TLS = &TLS{
			Mode: TLSMode(t.Mode.V), Domains: t.Domains.V, Email: t.Email.V,
			CA: t.CA.Or(DefaultACMECA), CARoot: t.CARoot.V,
			Storage: t.Storage.Or(DefaultACMEStorage), HTTPListen: t.HTTPListen.Or(DefaultHTTPListen),
			CertFile: t.CertFile.V, KeyFile: t.KeyFile.V,
		}
		oneOf(c, "server.tls.mode", srv.TLS.Mode, tlsModes...)
		switch srv.TLS.Mode {
		case TLSFiles:
			if t.CertFile.V == "" {
				c.add("server.tls.cert_file", "is required when mode = \"files\"")
			}
			if t.KeyFile.V == "" {
				c.add("server.tls.key_file", "is required when mode = \"files\"")
			}
			if !t.HTTPListen.Set {
				srv.TLS.HTTPListen = "" // no redirect listener unless asked for
			}
		case TLSACME:
			if len(t.Domains.V) == 0 {
				c.add("server.tls.domains", "at least one domain is required when mode = \"acme\"")
			}
		}
	}
	return srv
}

// validateLog checks [log].
func validateLog(l *rawLog, c *collector) Log {
	lg := Log{
		Level:  LogLevel(l.Level.Or(string(DefaultLogLevel))),
		Format: LogFormat(l.Format.Or(string(DefaultLogFormat))),
		Access: l.Access.Or(DefaultLogAccess), AccessReplay: l.Replay.V,
		ClientAddress: ClientAddress(l.Client.Or(string(DefaultClientAddress))),
		File:          l.File.V, AccessFile: l.AccFile.V,
	}
	for key, f := range map[string]scalar[string]{"log.file": l.File, "log.access_file": l.AccFile} {
		if f.Set && f.V == "" {
			c.add(key, `is empty: leave it out to log to stderr`)
		}
	}
	if lg.File != "" && lg.AccessFile == lg.File {
		c.add("log.access_file", "is log.file: leave it out to write the access log there")
	}
	oneOf(c, "log.level", lg.Level, logLevels...)
	oneOf(c, "log.format", lg.Format, logFormats...)
	oneOf(c, "log.client_address", lg.ClientAddress, clientAddresses...)
	if lg.AccessReplay != ReplayOff && lg.ClientAddress != ClientFull && slices.Contains(clientAddresses, lg.ClientAddress) {
		c.add("log.client_address", "%q: access_replay logs whole client addresses (replay keys requests by them); use one or the other", lg.ClientAddress)
	}
	return lg
}

// validateStore checks [store] and [store.redis].
func validateStore(st *rawStore, c *collector) Store {
	s := Store{Backend: Backend(st.Backend.Or(string(DefaultBackend))), MaxKeys: int(st.MaxKeys.Or(DefaultMaxKeys)),
		OverridesFile: st.OvFile.Or(DefaultOverridesFile)}
	oneOf(c, "store.backend", s.Backend, backends...)
	if st.MaxKeys.Set && st.MaxKeys.err == nil && st.MaxKeys.V < 1 {
		c.add("store.max_keys", "must be at least 1")
	}
	r := &st.Redis
	s.Redis = Redis{
		Addrs: r.Addrs.V, MasterName: r.MasterName.V, Username: r.Username.V, PasswordEnv: r.PasswordEnv.V,
		DB: int(r.DB.V), TLS: r.TLS.V, Timeout: r.Timeout.Or(DefaultRedisTimeout),
		Prefix: r.Prefix.Or(DefaultRedisPrefix), OnError: OnError(r.OnError.Or(string(DefaultOnError))),
	}
	if !r.Addrs.Set {
		s.Redis.Addrs = []string{DefaultRedisAddr}
	}
	oneOf(c, "store.redis.on_error", s.Redis.OnError, onErrors...)
	l := &st.Leases
	s.Leases = Leases{LeaseTime: l.LeaseTime.Or(DefaultLeaseTime), MaxShare: DefaultLeaseMaxShare,
		MinLease: l.MinLease.Or(DefaultMinLease), MaxKeys: int(l.MaxKeys.Or(DefaultLeaseMaxKeys))}
	if l.MaxShare.Set && l.MaxShare.err == nil {
		s.Leases.MaxShare = l.MaxShare.V
		if l.MaxShare.V <= 0 {
			c.add("store.leases.max_share", "%v: must be above 0 (a share of the quota)", l.MaxShare.V)
		}
	}
	if l.LeaseTime.Set && l.LeaseTime.err == nil && s.Leases.LeaseTime < time.Millisecond {
		c.add("store.leases.lease_time", "%v: must be at least 1ms", s.Leases.LeaseTime)
	}
	if l.MinLease.Set && l.MinLease.err == nil && s.Leases.MinLease < 1 {
		c.add("store.leases.min_lease", "%d: must be at least 1", s.Leases.MinLease)
	}
	if l.MaxKeys.Set && l.MaxKeys.err == nil && s.Leases.MaxKeys < 1 {
		c.add("store.leases.max_keys", "%d: must be at least 1", s.Leases.MaxKeys)
	}
	if s.Backend != BackendRedis {
		return s
	}
	rc := &s.Redis
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
	return s
}

// validateUpstream checks one [[upstream]], at index i and path key;
// names maps the names seen so far to their index.
func validateUpstream(u *rawUpstream, key string, names map[string]int, i int, c *collector) Upstream {
	up := Upstream{
		Name: u.Name.V, Timeout: u.Timeout.Or(DefaultUpstreamTimeout), PreserveHost: u.PreserveHost.V,
		MaxFails: int(u.MaxFails.Or(DefaultMaxFails)), FailTimeout: u.FailTimeout.Or(DefaultFailTimeout),
		Upgrades: DefaultUpgrades, AllowTrace: u.AllowTrace.V, Protocol: UpstreamProtocol(u.Protocol.Or(string(DefaultUpstreamProtocol))),
		Transport: Implementation(u.Transport.Or(string(DefaultTransport))),
		Buffering: u.Buffering.Or(DefaultRequestBuffering), MaxBodyBytes: u.MaxBodyBytes.Or(DefaultMaxBodyBytes),
		MinBodyRate: u.MinBodyRate.Or(DefaultMinBodyRate), RateWindow: u.RateWindow.Or(DefaultBodyRateWindow),
		MaxStreamsPerKey:     int(u.MaxStreams.Or(DefaultMaxStreamsPerKey)),
		ResponseBuffering:    u.RespBuffering.Or(DefaultResponseBuffering),
		ResponseBufferMemory: u.RespMemory.Or(DefaultResponseBufferMemory),
		ResponseBufferFile:   u.RespFile.Or(DefaultResponseBufferFile),
	}
	switch prev, dup := names[up.Name]; {
	case up.Name == "":
		c.add(key+".name", "is required")
	case dup:
		c.add(key+".name", "upstream %q duplicates upstream[%d]", up.Name, prev)
	default:
		names[up.Name] = i
	}
	if len(u.Targets.V) == 0 && u.Targets.err == nil {
		c.add(key+".targets", "at least one target URL is required")
	}
	for j, t := range u.Targets.V {
		target, err := url.Parse(t)
		if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
			c.add(key+".targets", "element %d: %q is not an http:// or https:// URL with a host", j, t)
			continue
		}
		up.Targets = append(up.Targets, target)
	}
	if up.Timeout <= 0 && u.Timeout.Set {
		c.add(key+".timeout", "must be greater than zero")
	}
	oneOf(c, key+".protocol", up.Protocol, upstreamProtocols...)
	oneOf(c, key+".transport", up.Transport, implementations...)
	if up.Protocol == ProtocolH2C && up.Transport == ImplLimitproxy {
		if u.Transport.Set {
			c.add(key+".transport", "limitproxy's transport speaks HTTP/1.1; an h2c upstream's is net/http's")
		}
		up.Transport = ImplNetHTTP
	}
	if up.Protocol == ProtocolH2C {
		for j, t := range up.Targets {
			if t.Scheme != "http" {
				c.add(key+".protocol", "h2c is HTTP/2 without TLS, for http:// targets; targets element %d is %s (https:// negotiates HTTP/2 by ALPN)", j, t)
			}
		}
	}
	if u.Upgrades.Set {
		up.Upgrades = nil
		for j, proto := range u.Upgrades.V {
			if !validToken(strings.SplitN(proto, "/", 2)[0]) || strings.Count(proto, "/") > 1 {
				c.add(key+".upgrades", "element %d: %q is not a protocol name of the Upgrade header (RFC 9110), such as \"websocket\"", j, proto)
				continue
			}
			up.Upgrades = append(up.Upgrades, strings.ToLower(proto))
		}
	}
	if u.MaxBodyBytes.Set && u.MaxBodyBytes.err == nil && up.MaxBodyBytes < 1 {
		c.add(key+".max_body_bytes", "must be at least 1")
	}
	if u.MinBodyRate.Set && u.MinBodyRate.err == nil && (up.MinBodyRate < 0 || up.MinBodyRate > 1<<30) {
		c.add(key+".min_body_rate", "%d: must be from 0 (no minimum) to 1073741824 bytes a second", up.MinBodyRate)
	}
	if up.RateWindow <= 0 && u.RateWindow.err == nil {
		c.add(key+".body_rate_window", "must be greater than zero")
	}
	if u.MaxStreams.Set && u.MaxStreams.err == nil && (u.MaxStreams.V < 1 || u.MaxStreams.V > 1_000_000) {
		c.add(key+".max_streams_per_key", "%d: must be from 1 to 1000000", u.MaxStreams.V)
	}
	if u.RespMemory.Set && u.RespMemory.err == nil && up.ResponseBufferMemory < 0 {
		c.add(key+".response_buffer_memory", "must not be negative (0 keeps a buffered answer on disk)")
	}
	if u.RespFile.Set && u.RespFile.err == nil && up.ResponseBufferFile < 0 {
		c.add(key+".response_buffer_file", "must not be negative (0: no file; past memory the answer streams)")
	}
	if u.MaxFails.Set && u.MaxFails.V < 0 {
		c.add(key+".max_fails", "must not be negative (0 turns passive health checks off)")
	}
	if u.Concurrency != nil {
		up.Concurrency = validateConcurrency(u.Concurrency, key+".concurrency", c)
	}
	return up
}

// validateConcurrency checks an [upstream.concurrency] at key.
func validateConcurrency(r *rawConcurrency, key string, c *collector) *Concurrency {
	cc := &Concurrency{
		Limit: int(r.Limit.V), Adaptive: r.Adaptive.V,
		MinLimit: int(r.MinLimit.Or(DefaultMinLimit)), MaxLimit: int(r.MaxLimit.Or(DefaultMaxLimit)),
		Queue: int(r.Queue.Or(DefaultConcQueue)), MaxWait: r.MaxWait.Or(DefaultConcMaxWait),
		FairShare: r.FairShare.Or(true), Mode: Mode(r.Mode.Or(string(Enforce))),
	}
	oneOf(c, key+".mode", cc.Mode, modes...)
	switch {
	case !cc.Adaptive && !r.Limit.Set:
		c.add(key, "set limit (the most requests in flight) or adaptive = true")
	case r.Limit.Set && (r.Limit.V < 1 || r.Limit.V > 1_000_000):
		c.add(key+".limit", "%d: must be from 1 to 1000000", r.Limit.V)
	}
	if !cc.Adaptive {
		for _, k := range []struct {
			name string
			set  bool
		}{{"min_limit", r.MinLimit.Set}, {"max_limit", r.MaxLimit.Set}} {
			if k.set {
				c.add(key+"."+k.name, "applies to an adaptive limit only (adaptive = true)")
			}
		}
	} else {
		if cc.MinLimit < 1 {
			c.add(key+".min_limit", "%d: must be at least 1", cc.MinLimit)
		}
		if cc.MaxLimit < cc.MinLimit || cc.MaxLimit > 1_000_000 {
			c.add(key+".max_limit", "%d: must be from min_limit (%d) to 1000000", cc.MaxLimit, cc.MinLimit)
		}
		if !r.Limit.Set {
			cc.Limit = max(cc.MinLimit, min(cc.MaxLimit, DefaultAdaptiveStart))
		} else if cc.Limit < cc.MinLimit || cc.Limit > cc.MaxLimit {
			c.add(key+".limit", "%d: an adaptive limit starts between min_limit (%d) and max_limit (%d)", cc.Limit, cc.MinLimit, cc.MaxLimit)
		}
	}
	if cc.Queue < 0 || cc.Queue > 1_000_000 {
		c.add(key+".queue", "%d: must be from 0 to 1000000", cc.Queue)
	}
	if cc.MaxWait < 0 {
		c.add(key+".max_wait", "must not be negative")
	}
	cc.Classes = validateClasses(r.Classes, key+".classes", c)
	return cc
}

// validateClasses checks an [upstream.concurrency]'s classes, highest
// first, and returns them with DefaultClass placed: where it is listed,
// else last.
func validateClasses(raws []rawClass, key string, c *collector) []Class {
	if len(raws) == 0 {
		return nil
	}
	if len(raws) > MaxClasses {
		c.add(key, "%d classes; at most %d", len(raws), MaxClasses)
	}
	var out []Class
	names := map[string]int{}
	sum := 0.0
	for i, r := range raws {
		k := fmt.Sprintf("%s[%d]", key, i)
		cl := Class{Name: r.Name.V, Reserve: r.Reserve.V}
		switch prev, dup := names[cl.Name]; {
		case cl.Name == "":
			c.add(k+".name", "is required")
		case !nameRE.MatchString(cl.Name):
			c.add(k+".name", "%q: use letters, digits, '.', '_' and '-' (it appears in metrics)", cl.Name)
		case dup:
			c.add(k+".name", "class %q duplicates classes[%d]", cl.Name, prev)
		default:
			names[cl.Name] = i
		}
		if r.Reserve.err == nil {
			sum += cl.Reserve
		}
		out = append(out, cl)
	}
	if sum >= 1 {
		c.add(key, "the reserves add up to %.3g: they must leave a share of the limit unreserved (below 1)", sum)
	}
	if _, ok := names[DefaultClass]; !ok {
		out = append(out, Class{Name: DefaultClass})
	}
	return out
}

// resolveClass checks p's class against its upstream's classes and sets
// p.Class to its index; a policy without one is in DefaultClass.
func resolveClass(p *Policy, r *rawPolicy, ups []Upstream, index map[string]int, c *collector) {
	i, ok := index[p.Upstream]
	if !ok || ups[i].Concurrency == nil {
		if r.Class.Set {
			c.add(fmt.Sprintf("policy[%d].class", p.Index), "upstream %q has no [upstream.concurrency], whose classes a policy's class names", p.Upstream)
		}
		return
	}
	classes := ups[i].Concurrency.Classes
	if len(classes) == 0 {
		if r.Class.Set && r.Class.V != DefaultClass {
			c.add(fmt.Sprintf("policy[%d].class", p.Index), "unknown class %q: upstream %q's [upstream.concurrency] has no classes", r.Class.V, p.Upstream)
		}
		return
	}
	name := r.Class.Or(DefaultClass)
	for j, cl := range classes {
		if cl.Name == name {
			p.Class, p.ClassName = j, name
			return
		}
	}
	c.add(fmt.Sprintf("policy[%d].class", p.Index), "unknown class %q: upstream %q has %s", name, p.Upstream, classNames(classes))
}

func classNames(cs []Class) string {
	var b strings.Builder
	for _, cl := range cs {
		if cl.Name == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(cl.Name))
	}
	return b.String()
}

// checkClientHeaderKey refuses a header: key part of p, or of one of its
// limits, that names the configured client_ip_header when that is not one
// of the well-known client-address headers parseKeyPart refuses anyway.
func checkClientHeaderKey(p *Policy, header string, c *collector) {
	if isClientAddressHeader(header) {
		return
	}
	bad := func(parts []KeyPart) bool {
		for _, kp := range parts {
			if kp.Kind == KeyHeader && kp.Name == header {
				return true
			}
		}
		return false
	}
	if bad(p.Key) {
		c.add(fmt.Sprintf("policy[%d].key", p.Index), "\"header:%s\": %s %s", header, header, errClientAddressKey)
		return
	}
	for j, lk := range p.LimitKeys {
		if bad(lk.Parts) {
			c.add(fmt.Sprintf("policy[%d].limits[%d].key", p.Index, j), "\"header:%s\": %s %s", header, header, errClientAddressKey)
			return
		}
	}
}

// validateRLS checks [rls].
func validateRLS(r *rawRLS, c *collector) RLS {
	out := RLS{
		Listen: r.Listen.V, CertFile: r.CertFile.V, KeyFile: r.KeyFile.V, ClientCAFile: r.ClientCAFile.V,
		MaxHitsAddend:              r.MaxHitsAddend.Or(DefaultRLSMaxHitsAddend),
		MaxDescriptors:             int(r.MaxDescriptors.Or(DefaultRLSMaxDescriptors)),
		MaxEntries:                 int(r.MaxEntries.Or(DefaultRLSMaxEntries)),
		MaxMessageBytes:            int(r.MaxMessage.Or(DefaultRLSMaxMessageBytes)),
		MaxConcurrentStreams:       int(r.MaxStreams.Or(DefaultRLSMaxStreams)),
		Compatibility:              Compatibility(r.Compatibility.Or(string(DefaultRLSCompatibility))),
		ResponseHeaders:            RLSHeaders(r.RespHeaders.Or(string(DefaultRLSResponseHeaders))),
		LimitHeader:                r.LimitHeader.Or(DefaultRLSLimitHeader),
		RemainingHeader:            r.RemainHeader.Or(DefaultRLSRemainingHeader),
		ResetHeader:                r.ResetHeader.Or(DefaultRLSResetHeader),
		ShadowMode:                 r.ShadowMode.V,
		QuotaMode:                  r.QuotaMode.V,
		StopIncrementWhenOverLimit: r.StopIncrement.V,
		DynamicMetadata:            r.DynMetadata.V,
		CountKeys:                  CountKeys(r.CountKeys.Or(string(DefaultRLSCountKeys))),
		Lookup:                     Lookup(r.Lookup.Or(string(DefaultRLSLookup))),
		ExpirationJitterMax:        r.ExpJitter.Or(DefaultRLSExpJitter),
		Domains:                    r.Domains.V,
	}
	oneOf(c, "rls.compatibility", out.Compatibility, compatibilities...)
	oneOf(c, "rls.response_headers", out.ResponseHeaders, rlsHeaders...)
	oneOf(c, "rls.count_keys", out.CountKeys, countKeys...)
	if r.CountKeys.Set && out.CountKeys == CountKeysJoined && out.Compatibility != CompatEnvoy {
		c.add("rls.count_keys", "%q needs compatibility = %q: without it a descriptor's count is its policy's", CountKeysJoined, CompatEnvoy)
	}
	oneOf(c, "rls.lookup", out.Lookup, lookups...)
	if r.ExpJitter.Set && r.ExpJitter.err == nil {
		switch d := out.ExpirationJitterMax; {
		case d < 0 || d > maxRLSExpJitter || d%time.Second != 0:
			c.add("rls.expiration_jitter_max", "%v: must be whole seconds from 0s to %v (the reference's EXPIRATION_JITTER_MAX_SECONDS)", d, maxRLSExpJitter)
		case d > 0 && out.Compatibility != CompatEnvoy:
			c.add("rls.expiration_jitter_max", "needs compatibility = %q: without it no count expires so", CompatEnvoy)
		}
	}
	if r.Lookup.Set && out.Lookup == LookupJoined && out.Compatibility != CompatEnvoy {
		c.add("rls.lookup", "%q needs compatibility = %q: it is envoyproxy/ratelimit's lookup", LookupJoined, CompatEnvoy)
	}
	if out.StopIncrementWhenOverLimit && out.Compatibility != CompatEnvoy {
		c.add("rls.stop_increment_when_over_limit", "needs compatibility = %q: without it a rejected descriptor is never counted", CompatEnvoy)
	}
	for _, h := range []struct {
		key  string
		name string
	}{{"limit_header", out.LimitHeader}, {"remaining_header", out.RemainingHeader}, {"reset_header", out.ResetHeader}} {
		if !validToken(h.name) {
			c.add("rls."+h.key, "%q is not a header name", h.name)
		}
	}
	for i, d := range out.Domains {
		if d == "" {
			c.add("rls.domains", "element %d is empty: a call's domain never is", i)
		}
	}
	if out.Listen != "" {
		if _, _, err := net.SplitHostPort(out.Listen); err != nil {
			c.add("rls.listen", "%q is not host:port (write e.g. \"127.0.0.1:8081\")", out.Listen)
		}
	}
	if (out.CertFile == "") != (out.KeyFile == "") {
		c.add("rls", "cert_file and key_file go together: both for TLS, neither for h2c")
	}
	if out.ClientCAFile != "" && out.CertFile == "" {
		c.add("rls.client_ca_file", "needs TLS: set cert_file and key_file")
	}
	bound := func(key string, v, lo, hi int64) {
		if v < lo || v > hi {
			c.add("rls."+key, "%d: must be from %d to %d", v, lo, hi)
		}
	}
	bound("max_hits_addend", out.MaxHitsAddend, 1, limiter.MaxCount)
	bound("max_descriptors", int64(out.MaxDescriptors), 1, 1024)
	bound("max_entries", int64(out.MaxEntries), 1, 64)
	bound("max_message_bytes", int64(out.MaxMessageBytes), 1024, 16<<20)
	bound("max_concurrent_streams", int64(out.MaxConcurrentStreams), 1, 1<<20)
	return out
}

// validateRLQS checks [rlqs].
func validateRLQS(r *rawRLQS, c *collector) RLQS {
	out := RLQS{
		Listen: r.Listen.V, CertFile: r.CertFile.V, KeyFile: r.KeyFile.V, ClientCAFile: r.ClientCAFile.V,
		AssignmentTTL: r.AssignmentTTL.Or(DefaultRLQSAssignmentTTL), MaxShare: DefaultRLQSMaxShare,
		MaxBuckets: int(r.MaxBuckets.Or(DefaultRLQSMaxBuckets)), MaxStreams: int(r.MaxStreams.Or(DefaultRLQSMaxStreams)),
	}
	if r.MaxShare.Set && r.MaxShare.err == nil {
		out.MaxShare = r.MaxShare.V
		if r.MaxShare.V <= 0 {
			c.add("rlqs.max_share", "%v: must be above 0 (a share of the quota)", r.MaxShare.V)
		}
	}
	if out.Listen != "" {
		if _, _, err := net.SplitHostPort(out.Listen); err != nil {
			c.add("rlqs.listen", "%q is not host:port (write e.g. \"127.0.0.1:18081\")", out.Listen)
		}
	}
	if (out.CertFile == "") != (out.KeyFile == "") {
		c.add("rlqs", "cert_file and key_file go together: both for TLS, neither for h2c")
	}
	if out.ClientCAFile != "" && out.CertFile == "" {
		c.add("rlqs.client_ca_file", "needs TLS: set cert_file and key_file")
	}
	if r.AssignmentTTL.Set && r.AssignmentTTL.err == nil {
		if d := out.AssignmentTTL; d < time.Second || d > time.Hour || d%time.Second != 0 {
			c.add("rlqs.assignment_ttl", "%v: must be whole seconds from 1s to 1h (Envoy reads the seconds only)", d)
		}
	}
	for _, b := range []struct {
		key   string
		v, hi int64
	}{{"max_buckets", int64(out.MaxBuckets), 1 << 20}, {"max_streams", int64(out.MaxStreams), 1 << 20}} {
		if b.v < 1 || b.v > b.hi {
			c.add("rlqs."+b.key, "%d: must be from 1 to %d", b.v, b.hi)
		}
	}
	return out
}

// validateIdentity checks [identity]; nil without one.
func validateIdentity(r *rawIdentity, c *collector) *Identity {
	if r == nil {
		return nil
	}
	id := &Identity{
		JWKSFile: r.JWKSFile.V, JWKSURL: r.JWKSURL.V, SecretEnv: r.SecretEnv.V,
		Algorithms: r.Algorithms.V, Issuer: r.Issuer.V, Audience: r.Audience.V,
		Leeway:          r.Leeway.Or(DefaultIdentityLeeway),
		RefreshInterval: r.Refresh.Or(DefaultIdentityRefresh),
		Header:          r.Header.V, Cookie: r.Cookie.V,
	}
	sources := 0
	for _, set := range []bool{id.JWKSFile != "", id.JWKSURL != "", id.SecretEnv != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		c.add("identity", "set exactly one of jwks_file, jwks_url and secret_env (the keys tokens are verified with)")
	}
	if id.JWKSURL != "" {
		u, err := url.Parse(id.JWKSURL)
		loopback := func(h string) bool {
			a, err := netip.ParseAddr(h)
			return strings.EqualFold(h, "localhost") || err == nil && a.IsLoopback()
		}
		if err != nil || u.Host == "" || u.Scheme != "https" && (u.Scheme != "http" || !loopback(u.Hostname())) {
			c.add("identity.jwks_url", "%q: must be an https URL, or http to a loopback address (keys fetched in the clear could be anyone's)", id.JWKSURL)
		}
	}
	if id.SecretEnv != "" && !envName.MatchString(id.SecretEnv) {
		c.add("identity.secret_env", "%q is not an environment variable name (the secret itself never goes in the file)", id.SecretEnv)
	}
	if r.Algorithms.Set && len(id.Algorithms) == 0 {
		c.add("identity.algorithms", "empty: leave it out for the defaults")
	}
	for _, alg := range id.Algorithms {
		switch {
		case slices.Contains(identityHMAC, alg):
			if id.SecretEnv == "" {
				c.add("identity.algorithms", "%s needs secret_env: HMAC tokens are never verified with keys of a JWKS", alg)
			}
		case slices.Contains(identityAlgorithms, alg):
			if id.SecretEnv != "" && id.JWKSFile == "" && id.JWKSURL == "" {
				c.add("identity.algorithms", "%s needs jwks_file or jwks_url", alg)
			}
		default:
			c.add("identity.algorithms", "%q is not one of %s (\"none\" never is)", alg, strings.Join(append(slices.Clone(identityAlgorithms), identityHMAC...), ", "))
		}
	}
	if r.Refresh.Set && id.RefreshInterval < time.Second {
		c.add("identity.refresh_interval", "%s: must be at least 1s", id.RefreshInterval)
	}
	if id.Header != "" && id.Cookie != "" {
		c.add("identity", "header and cookie: set one, not both")
	}
	if id.Header != "" && !validToken(id.Header) {
		c.add("identity.header", "%q is not a header name", id.Header)
	}
	if id.Header != "" {
		id.Header = canonicalHeader(id.Header)
	}
	if id.Cookie != "" && !validToken(id.Cookie) {
		c.add("identity.cookie", "%q is not a cookie name", id.Cookie)
	}
	return id
}

// checkIdentityUse refuses a jwt:CLAIM key part or a claims condition in
// a configuration without [identity]: there would be no verified claims
// to read.
func checkIdentityUse(p *Policy, identity bool, c *collector) {
	if identity {
		return
	}
	if len(p.Match.Claims) > 0 {
		c.add(fmt.Sprintf("policy[%d].match.claims", p.Index), "a claims condition needs an [identity] table: the verifier of the tokens it reads")
	}
	refuseKeyKind(p, KeyJWT, "a jwt: key part needs an [identity] table: the verifier of the tokens it reads", c)
}

// checkRLSPolicy refuses what an RLS policy p (raw r) cannot have: HTTP
// conditions, key parts other than descriptor:KEY of its own patterns, a
// [policy.concurrency] or class, limits that read the answer.
func checkRLSPolicy(p *Policy, r *rawPolicy, c *collector) {
	key := fmt.Sprintf("policy[%d]", p.Index)
	if m := r.Match; m.Hosts.Set || m.Methods.Set || m.Path.Set || m.PathPrefix.Set || m.PathRegex.Set || m.Headers != nil || m.Claims != nil {
		c.add(key+".match", "an RLS policy (rls_domain) matches descriptors only: hosts, methods, path, path_prefix, path_regex, headers and claims are HTTP conditions")
	}
	if r.Conc != nil {
		c.add(key+".concurrency", "an RLS policy cannot limit concurrency: the rate limit service never sees a request end")
	}
	if r.Class.Set {
		c.add(key+".class", "an RLS policy has no upstream, whose classes a class names")
	}
	if r.Reject != nil {
		c.add(key+".reject", "an RLS policy answers OVER_LIMIT: Envoy writes the refusal (its rate_limited_status)")
	}
	for i, ch := range p.Charges {
		if ch.Count != nil || ch.CostFrom != "" || ch.Deferred() {
			c.add(fmt.Sprintf("%s.limits[%d]", key, i), "an RLS policy's limits cannot read the answer (count, cost_from, estimate): the rate limit service never sees it")
			break
		}
	}
	switch {
	case p.RLS.Unlimited && len(p.Limits) > 0:
		c.add(key+".unlimited", "an unlimited policy has no [[policy.limits]]: it answers limit_remaining 4294967295 and counts nothing")
	case p.RLS.QuotaMode && len(p.Limits) == 0:
		c.add(key+".quota_mode", "needs [[policy.limits]]: a quota is a limit")
	}
	for j, name := range p.RLS.Replaces {
		switch {
		case name == "":
			c.add(key+".replaces", "element %d is empty: name a limit (its name key)", j)
		case slices.Contains(p.RLS.Names, name):
			c.add(key+".replaces", "%q is the name of one of this policy's own limits: a policy cannot replace itself", name)
		}
	}
	bad := func(parts []KeyPart) string {
		seen := map[string]int{}
		for i := range parts {
			kp := &parts[i]
			if kp.Kind != KeyDescriptor {
				return fmt.Sprintf("%q: an RLS policy is keyed by descriptor:KEY parts only", kp.String())
			}
			if resolveNth(kp, p.Match.Descriptor) {
				continue
			}
			if countPatterns(p.Match.Descriptor, kp.Name) == 0 {
				if key, _, ok := strings.Cut(kp.Name, "#"); ok && countPatterns(p.Match.Descriptor, key) > 0 {
					return fmt.Sprintf("%q: the match's descriptor has %d entries %q: descriptor:KEY#N reads the Nth, from 1", kp.String(), countPatterns(p.Match.Descriptor, key), key)
				}
				return fmt.Sprintf("%q: the match's descriptor has no entry %q, so the part would always be missing", kp.String(), kp.Name)
			}
			// The nth part of one KEY reads the nth entry of that key.
			seen[kp.Name]++
			if n := seen[kp.Name]; n > countPatterns(p.Match.Descriptor, kp.Name) {
				return fmt.Sprintf("%q appears %d times, more than the match's descriptor has entries %q (%d): the nth part of a KEY reads its nth entry (or write descriptor:KEY#N)", kp.String(), n, kp.Name, countPatterns(p.Match.Descriptor, kp.Name))
			}
		}
		return ""
	}
	if why := bad(p.Key); why != "" {
		c.add(key+".key", "%s", why)
		return
	}
	for j, lk := range p.LimitKeys {
		if why := bad(lk.Parts); why != "" {
			c.add(fmt.Sprintf("%s.limits[%d].key", key, j), "%s (a shared limit used by an RLS policy needs a key of descriptor: parts)", why)
			return
		}
	}
}

// resolveNth makes kp, a descriptor part named "KEY#N" where KEY is a key
// of ds with at least N entries and "KEY#N" none, the part of the Nth
// entry of KEY (Nth N); it reports whether it did.
func resolveNth(kp *KeyPart, ds []DescriptorPattern) bool {
	if kp.Nth > 0 {
		return true // resolved already (a key shared by the policy and a limit)
	}
	i := strings.LastIndexByte(kp.Name, '#')
	if i < 0 || countPatterns(ds, kp.Name) > 0 {
		return false
	}
	n, err := strconv.Atoi(kp.Name[i+1:])
	if err != nil || n < 1 || n > countPatterns(ds, kp.Name[:i]) || kp.Name[i+1] == '+' || kp.Name[i+1] == '0' {
		return false
	}
	kp.Name, kp.Nth = kp.Name[:i], n
	return true
}

// valueToMetric resolves an RLS policy's value_to_metric, entries named
// "KEY" (the first pattern of KEY) or "KEY#N" (its Nth), to the indexes
// of ds; not nil, even when empty.
func valueToMetric(names []string, ds []DescriptorPattern, key string, c *collector) []int {
	out := []int{}
	for _, name := range names {
		k, nth := name, 1
		if countPatterns(ds, name) == 0 {
			if i := strings.LastIndexByte(name, '#'); i >= 0 {
				n, err := strconv.Atoi(name[i+1:])
				if err == nil && n >= 1 && name[i+1] != '+' && name[i+1] != '0' {
					k, nth = name[:i], n
				}
			}
		}
		at := -1
		for j, d := range ds {
			if d.Key == k {
				if nth--; nth == 0 {
					at = j
					break
				}
			}
		}
		if at < 0 {
			c.add(key, "%q: the match's descriptor has no such entry (write KEY, or KEY#N for its Nth)", name)
			continue
		}
		if !slices.Contains(out, at) {
			out = append(out, at)
		}
	}
	return out
}

// countPatterns is how many of ds are of key.
func countPatterns(ds []DescriptorPattern, key string) int {
	n := 0
	for _, d := range ds {
		if d.Key == key {
			n++
		}
	}
	return n
}

// refuseRLSKeys refuses, in the raw HTTP policy r (policy[i]), the keys
// only an RLS policy has.
func refuseRLSKeys(r *rawPolicy, i int, c *collector) {
	for _, k := range []struct {
		name string
		set  bool
	}{{"unlimited", r.Unlimited.Set}, {"quota_mode", r.QuotaMode.Set}, {"replaces", r.Replaces.Set}, {"metadata", r.Metadata.Set}, {"value_to_metric", r.ToMetric.Set}} {
		if k.set {
			c.add(fmt.Sprintf("policy[%d].%s", i, k.name), "is an RLS policy's (match.rls_domain): it says how Envoy's descriptors are answered")
		}
	}
}

// checkHTTPPolicyKeys refuses a descriptor:KEY part in an HTTP policy's
// key, or its limits'.
func checkHTTPPolicyKeys(p *Policy, c *collector) {
	refuseKeyKind(p, KeyDescriptor, "a descriptor: key part is an RLS policy's (match.rls_domain): an HTTP request has no descriptor", c)
}

// refuseKeyKind refuses, with why, the first key of p (its own, or a
// limit's) that has a part of kind.
func refuseKeyKind(p *Policy, kind KeyKind, why string, c *collector) {
	has := func(parts []KeyPart) bool {
		return slices.ContainsFunc(parts, func(kp KeyPart) bool { return kp.Kind == kind })
	}
	if has(p.Key) {
		c.add(fmt.Sprintf("policy[%d].key", p.Index), "%s", why)
		return
	}
	for j, lk := range p.LimitKeys {
		if has(lk.Parts) {
			c.add(fmt.Sprintf("policy[%d].limits[%d].key", p.Index, j), "%s", why)
			return
		}
	}
}

// validatePolicies checks every [[policy]]; upstreams are the names of the
// upstreams, and check, if not nil, the store's own check of each limit.
func validatePolicies(raws []rawPolicy, upstreams map[string]int, shared map[string]sharedLimit, check func(limiter.Limit) error, c *collector) []Policy {
	if len(raws) == 0 {
		c.add("policy", "at least one [[policy]] is required")
	}
	var out []Policy
	names := map[string]int{}
	catchAll := -1
	for i, p := range raws {
		key := fmt.Sprintf("policy[%d]", i)
		spec := Policy{
			Name: p.Name.V, Index: i, Upstream: p.Upstream.V,
			Mode: Mode(p.Mode.Or(string(DefaultMode))), OnMissing: OnMissing(p.OnMissing.Or(string(DefaultOnMissing))),
		}
		switch prev, dup := names[spec.Name]; {
		case spec.Name == "":
			c.add(key+".name", "is required")
		case !nameRE.MatchString(spec.Name):
			c.add(key+".name", "%q: use letters, digits, '.', '_' and '-' (it appears in headers, metrics and logs)", spec.Name)
		case dup:
			c.add(key+".name", "policy %q duplicates policy[%d]'s name", spec.Name, prev)
		default:
			names[spec.Name] = i
		}
		spec.Match = compileMatch(p.Match, key+".match", c)
		rls := spec.Match.RLS()
		switch _, ok := upstreams[spec.Upstream]; {
		case rls:
			if p.Upstream.Set {
				c.add(key+".upstream", "an RLS policy (match.rls_domain) has no upstream: Envoy forwards the request, limitproxy only decides")
			}
		case spec.Upstream == "":
			c.add(key+".upstream", "is required")
		case !ok:
			c.add(key+".upstream", "unknown upstream %q", spec.Upstream)
		}
		oneOf(c, key+".mode", spec.Mode, modes...)
		oneOf(c, key+".on_missing", spec.OnMissing, onMissings...)
		keyParts := []string{"ip"}
		if rls {
			// The reference server's counting: one counter per distinct
			// descriptor, every entry's value in order.
			keyParts = keyParts[:0]
			for _, d := range spec.Match.Descriptor {
				keyParts = append(keyParts, "descriptor:"+d.Key)
			}
		}
		if p.Key.Set {
			keyParts = p.Key.V
		}
		for j, part := range keyParts {
			kp, err := parseKeyPart(part)
			if err != nil {
				c.add(key+".key", "element %d: %v", j, err)
				continue
			}
			spec.Key = append(spec.Key, kp)
		}
		if rls {
			// Never matches an HTTP request, nor shadowed by one that
			// matches them all.
		} else if catchAll >= 0 {
			c.add(key, "can never match: policy[%d] %q before it matches every request", catchAll, raws[catchAll].Name.V)
		} else if spec.Match.All {
			catchAll = i
		}
		checkUnauthorized(c, key, spec.Key, spec.OnMissing, p.OnMissing.Set)
		pk := LimitKey{Parts: spec.Key, OnMissing: spec.OnMissing}
		if p.Conc != nil {
			spec.Concurrency = validatePolicyConc(p.Conc, key+".concurrency", c)
		}
		if len(p.Limits) > 0 || spec.Concurrency == nil && !rls {
			// An RLS policy may have none: it answers OK without a limit
			// (or, unlimited, with limit_remaining 4294967295).
			spec.Limits, spec.LimitKeys, spec.Charges, spec.LimitNames, spec.RLS.Names, spec.RLS.Zero = compilePolicyLimits(p.Limits, spec.Name, key, pk, shared, check, rls, c)
		}
		spec.RLS.Unlimited, spec.RLS.QuotaMode, spec.RLS.Replaces = p.Unlimited.V, p.QuotaMode.V, p.Replaces.V
		spec.RLS.Metadata = p.Metadata.V
		if p.ToMetric.Set && p.ToMetric.err == nil {
			spec.RLS.ValueToMetric = valueToMetric(p.ToMetric.V, spec.Match.Descriptor, key+".value_to_metric", c)
		}
		for _, lk := range spec.LimitKeys {
			if !lk.Equal(pk) {
				spec.OwnKeys = true
			}
		}
		spec.Reject = Reject{Status: DefaultRejectStatus, ContentType: DefaultRejectContentType}
		if rj := p.Reject; rj != nil {
			spec.Reject.Status = int(rj.Status.Or(DefaultRejectStatus))
			if spec.Reject.Status < 400 || spec.Reject.Status > 599 {
				c.add(key+".reject.status", "%d is not an HTTP error status (400..599)", spec.Reject.Status)
			}
			spec.Reject.Body = rj.Body.V
			switch {
			case rj.Body.Set && rj.Body.V == "":
				// "" is no custom body: the problem+json one would go out
				// under the custom body's content type.
				c.add(key+".reject.body", "is empty: leave body out for the problem+json body")
			case rj.Body.Set:
				spec.Reject.ContentType = rj.ContentType.Or(DefaultCustomContentType)
				if !fieldValue(spec.Reject.ContentType) {
					c.add(key+".reject.content_type", "%q is not a header field value (empty, or a control character such as CR, LF or NUL)", spec.Reject.ContentType)
				}
			case rj.ContentType.Set:
				c.add(key+".reject.content_type", "is set but body is not")
			}
		}
		if p.Ban != nil {
			spec.Ban = validateBan(p.Ban, spec, key+".ban", c)
		}
		out = append(out, spec)
	}
	return out
}

// validateBan checks a [policy.ban] at key of policy p.
func validateBan(r *rawBan, p Policy, key string, c *collector) *Ban {
	b := &Ban{
		Duration: r.Duration.D, Escalation: r.Escalation.Or(1), Status: int(r.Status.Or(DefaultRejectStatus)),
		Shadow: Mode(r.Mode.Or(string(p.Mode))) == Shadow,
	}
	if len(p.Limits) == 0 {
		c.add(key, "a ban follows a rejection by one of the policy's [[policy.limits]], and it has none")
	}
	for i, lk := range p.LimitKeys {
		if len(lk.Parts) == 0 {
			c.add(key, "limits[%d] counts every client under one key (key = []): a ban of that key would refuse everyone", i)
			break
		}
	}
	oneOf(c, key+".mode", Mode(r.Mode.Or(string(p.Mode))), modes...)
	switch {
	case !r.Duration.Set:
		c.add(key+".duration", "is required: how long a key that goes over a limit is refused")
	case r.Duration.err == nil && b.Duration <= 0:
		c.add(key+".duration", "must be above zero")
	}
	if r.Escalation.err == nil && (b.Escalation < 1 || b.Escalation > 1000) {
		c.add(key+".escalation", "%d: must be from 1 (every ban as long) to 1000", b.Escalation)
	}
	b.MaxDuration = b.Duration
	if b.Escalation > 1 {
		b.MaxDuration = max(b.Duration, DefaultBanMax)
	}
	if r.MaxDuration.Set {
		b.MaxDuration = r.MaxDuration.D
		if r.MaxDuration.err == nil && r.Duration.err == nil && b.MaxDuration < b.Duration {
			c.add(key+".max_duration", "%v is shorter than duration (%v)", b.MaxDuration, b.Duration)
		}
	}
	b.ForgetAfter = r.ForgetAfter.Or(DefaultBanForget)
	if b.Status != http.StatusTooManyRequests && b.Status != http.StatusForbidden {
		c.add(key+".status", "%d: a ban answers 429 or 403", b.Status)
	}
	return b
}

// sharedLimit is a validated [[shared_limit]].
type sharedLimit struct {
	index int
	limit limiter.Limit // Shared under its name
	key   LimitKey
}

// defaultSharedKey is a shared limit's key when it sets none: per client
// address, as an nginx zone is most often keyed.
var defaultSharedKey = LimitKey{Parts: []KeyPart{{Kind: KeyIP}}, OnMissing: MissingShared}

// validateShared checks every [[shared_limit]]: a name, a limit, and the
// key it counts under (its own, ["ip"] by default), and returns them by
// name. check, if not nil, is the store's own check of each limit.
func validateShared(raws []rawLimit, check func(limiter.Limit) error, c *collector) map[string]sharedLimit {
	out := map[string]sharedLimit{}
	for i, r := range raws {
		key := fmt.Sprintf("shared_limit[%d]", i)
		name := r.Name.V
		valid := false
		switch prev, dup := out[name]; {
		case name == "":
			c.add(key+".name", "is required")
		case !nameRE.MatchString(name):
			c.add(key+".name", "%q: use letters, digits, '.', '_' and '-' (it appears in logs and the admin API)", name)
		case dup:
			c.add(key+".name", "shared limit %q duplicates shared_limit[%d]", name, prev.index)
		default:
			valid = true
		}
		if r.Shared.Set {
			c.add(key+".shared", "is a key of [[policy.limits]], which use a shared limit")
		}
		for _, field := range chargeFields(&r) {
			c.add(key+"."+field, "is a key of a policy's own [[policy.limits]]: a shared limit is charged as the request is admitted")
		}
		lk := limitKey(&r, defaultSharedKey, key, c)
		ok := windowLimitOK(&r, false, key, c)
		var lim limiter.Limit
		if ok {
			lim, ok = compileLimit(&r, key, check, c)
		}
		if valid && ok {
			out[name] = sharedLimit{index: i, limit: lim.Shared(name), key: lk}
		}
	}
	return out
}

// MaxRLSLimit is the largest limit of an RLS policy's fixed_window:
// envoyproxy/ratelimit's largest requests_per_unit (a uint32). Other
// limits are at most limiter.MaxCount.
const MaxRLSLimit = math.MaxUint32

// windowLimitOK reports whether r's limit is within its bound: a fixed
// window's limit, which the limiter takes up to limiter.MaxWindowLimit,
// is at most MaxRLSLimit in an RLS policy (rls) and limiter.MaxCount
// elsewhere, as every other count is.
func windowLimitOK(r *rawLimit, rls bool, key string, c *collector) bool {
	q := r.Limit.V
	bound := int64(limiter.MaxCount)
	if rls {
		bound = MaxRLSLimit
	}
	if r.Algorithm.V == limiter.FixedWindow.String() && r.Limit.Set && r.Limit.err == nil && q > bound {
		msg := "%d is above the maximum of %d"
		if !rls {
			msg += " (an RLS policy's fixed_window may have up to 4294967295, envoyproxy/ratelimit's largest requests_per_unit)"
		}
		c.add(key+".limit", msg, q, bound)
		return false
	}
	return true
}

// limitKey returns the key a limit counts under: def, or what the limit's
// own key and on_missing set.
func limitKey(r *rawLimit, def LimitKey, key string, c *collector) LimitKey {
	lk := def
	if r.Key.Set {
		lk.Parts = nil
		for j, part := range r.Key.V {
			kp, err := parseKeyPart(part)
			if err != nil {
				c.add(key+".key", "element %d: %v", j, err)
				continue
			}
			lk.Parts = append(lk.Parts, kp)
		}
	}
	if r.OnMissing.Set {
		lk.OnMissing = OnMissing(r.OnMissing.V)
		oneOf(c, key+".on_missing", lk.OnMissing, onMissings...)
	}
	checkUnauthorized(c, key, lk.Parts, lk.OnMissing, r.OnMissing.Set)
	return lk
}

// checkUnauthorized refuses on_missing = "unauthorized" (set at key, or
// inherited when set is false) for a key without a jwt: part: its 401
// says the request lacks a valid token, which only a jwt: part reads.
func checkUnauthorized(c *collector, key string, parts []KeyPart, om OnMissing, set bool) {
	if om != MissingUnauthorized || !set {
		return
	}
	for _, kp := range parts {
		if kp.Kind == KeyJWT {
			return
		}
	}
	c.add(key+".on_missing", `"unauthorized" answers 401 for a request without a valid token: the key needs a jwt: part (use "reject" for a 400)`)
}

// validatePolicyConc checks a [policy.concurrency] at key.
func validatePolicyConc(r *rawPolicyConc, key string, c *collector) *PolicyConcurrency {
	pc := &PolicyConcurrency{Limit: r.Limit.V, Queue: int(r.Queue.V), MaxWait: r.MaxWait.Or(DefaultConcMaxWait)}
	switch {
	case !r.Limit.Set:
		c.add(key+".limit", "is required: the most requests of one client in flight")
	case r.Limit.V < 1 || r.Limit.V > 1_000_000:
		c.add(key+".limit", "%d: must be from 1 to 1000000", r.Limit.V)
	}
	if r.Queue.V < 0 || r.Queue.V > 1_000_000 {
		c.add(key+".queue", "%d: must be from 0 to 1000000", r.Queue.V)
	}
	if pc.MaxWait < 0 {
		c.add(key+".max_wait", "must not be negative")
	}
	return pc
}

// compilePolicyLimits validates the [[policy.limits]] of the policy named
// policyName, each its own limit or a use of a [[shared_limit]], and
// returns them with the key each counts under (policyKey unless it sets
// its own), the name each goes by in the RateLimit fields (see
// Policy.LimitName) and each one's name key ("" for none).
//
// In an RLS policy (rls), a fixed window's limit may be 0: it admits
// nothing (envoyproxy/ratelimit's requests_per_unit: 0). It is bound
// with a limit of 1, which gives it its state, and zero reports it.
func compilePolicyLimits(raws []rawLimit, policyName, policyKey string, pk LimitKey, shared map[string]sharedLimit, check func(limiter.Limit) error, rls bool, c *collector) (_ []limiter.Limit, _ []LimitKey, _ []Charge, _ []string, _ []string, zero []bool) {
	if len(raws) == 0 {
		c.add(policyKey+".limits", "at least one [[policy.limits]] (or a [policy.concurrency]) is required")
		return nil, nil, nil, nil, nil, nil
	}
	if len(raws) > limiter.MaxLimits {
		c.add(policyKey+".limits", "%d limits; at most %d per policy", len(raws), limiter.MaxLimits)
	}
	var (
		out      []limiter.Limit
		keys     []LimitKey
		charges  []Charge
		deferred bool
		leaky    = -1
		uses     = map[string]int{}
		named    []string // each limit's name key, "" for none
		at       []string // each limit's key in the file
	)
	for i := range raws {
		r := &raws[i]
		key := fmt.Sprintf("%s.limits[%d]", policyKey, i)
		if r.Name.Set && !r.Shared.Set {
			_, isShared := shared[r.Name.V]
			switch name := r.Name.V; {
			case !nameRE.MatchString(name):
				c.add(key+".name", "%q: use letters, digits, '.', '_' and '-' (it appears in the RateLimit fields)", name)
			case isShared:
				c.add(key+".name", "%q is the name of a [[shared_limit]]; a client would take this limit for that shared budget: name it otherwise, or use the shared limit with shared = %q", name, name)
			}
		}
		var (
			lim limiter.Limit
			lk  LimitKey
		)
		if r.Shared.Set {
			name := r.Shared.V
			for field, set := range setFields(r) {
				if set && field != "shared" {
					c.add(key+"."+field, "is set with shared: a shared limit's parameters and key are its [[shared_limit]]'s")
				}
			}
			sh, ok := shared[name]
			switch prev, twice := uses[name]; {
			case !ok:
				c.add(key+".shared", "no [[shared_limit]] is called %q", name)
				continue
			case twice:
				c.add(key+".shared", "shared limit %q is limits[%d] already", name, prev)
				continue
			}
			uses[name] = i
			lim, lk = sh.limit, sh.key
		} else {
			lk = limitKey(r, pk, key, c)
			isZero := rls && r.Limit.Set && r.Limit.err == nil && r.Limit.V == 0 && r.Algorithm.V == limiter.FixedWindow.String()
			if isZero {
				one := *r
				one.Limit.V = 1
				r = &one
				if zero == nil {
					zero = make([]bool, len(raws))
				}
				zero[i] = true
			}
			var ok bool
			if !windowLimitOK(r, rls, key, c) {
				continue
			}
			if lim, ok = compileLimit(r, key, check, c); !ok {
				continue
			}
		}
		ch := compileCharge(r, lim.Algorithm(), key, c)
		if q, _ := lim.Quota(); ch.CostFrom != "" && r.Estimate.Set && ch.Estimate > q {
			c.add(key+".estimate", "%d is above the limit's quota (%d): no request could ever be admitted", ch.Estimate, q)
		}
		deferred = deferred || ch.Deferred()
		if lim.Algorithm() == limiter.LeakyBucket {
			if leaky >= 0 {
				at := key + ".algorithm"
				if r.Shared.Set {
					at = key + ".shared"
				}
				c.add(at, "a policy may have one leaky_bucket (a request waits in one queue); limits[%d] is one already", leaky)
			}
			leaky = i
		}
		out = append(out, lim)
		keys = append(keys, lk)
		charges = append(charges, ch)
		if r.Shared.Set {
			named = append(named, "") // its [[shared_limit]]'s
		} else {
			named = append(named, r.Name.V)
		}
		at = append(at, key)
	}
	if !deferred {
		charges = nil
	}
	if zero != nil {
		// Aligned with out: a limit refused above has no place there.
		zero = zero[:len(out)]
	}
	return out, keys, charges, limitNames(policyName, out, named, at, c), named, zero
}

// limitNames returns the name each of a policy's limits goes by in the
// RateLimit fields: named[i], or the one Policy.LimitName derives. Two
// limits of one policy may not go by one name (at holds their keys in the
// file).
func limitNames(policyName string, limits []limiter.Limit, named, at []string, c *collector) []string {
	p := Policy{Name: policyName, Limits: limits, LimitNames: named}
	names := make([]string, len(limits))
	seen := map[string]int{}
	for i := range limits {
		names[i] = p.LimitName(i)
		if prev, dup := seen[names[i]]; dup {
			where := at[i]
			if named[i] != "" {
				where += ".name"
			}
			c.add(where, "goes by %q in the RateLimit fields, as %s does: give one a name of its own (name = \"...\")", names[i], at[prev][strings.LastIndex(at[prev], ".")+1:])
			continue
		}
		seen[names[i]] = i
	}
	return names
}

// compileCharge validates the keys of a limit that make it read the
// answer: count, cost_from, estimate and estimate_from.
func compileCharge(r *rawLimit, alg limiter.Algorithm, key string, c *collector) Charge {
	var ch Charge
	if r.Shared.Set {
		for _, field := range chargeFields(r) {
			c.add(key+"."+field, "is set with shared: a shared limit is charged as the request is admitted")
		}
		return ch
	}
	if cr := r.Count; cr != nil {
		ch.Count = &CountRule{Status: cr.Status.V, Header: cr.Header.V}
		switch {
		case !cr.Status.Set && !cr.Header.Set:
			c.add(key+".count", "give status (e.g. [401, \"5xx\"]) or header (a response header that marks a counted answer), or both")
		case cr.Status.Set && cr.Status.err == nil && len(cr.Status.V) == 0:
			c.add(key+".count.status", "is empty: no answer would ever count")
		}
		if cr.Header.Set && !validHeaderName(cr.Header.V) {
			c.add(key+".count.header", "%q is not a header name", cr.Header.V)
		}
		ch.Count.Header = http.CanonicalHeaderKey(ch.Count.Header)
	}
	if r.CostFrom.Set {
		kind, name, _ := strings.Cut(r.CostFrom.V, ":")
		switch {
		case kind != "header" && kind != "trailer" || !validHeaderName(name):
			c.add(key+".cost_from", "%q: write \"header:NAME\" or \"trailer:NAME\" (the response header or trailer holding the cost)", r.CostFrom.V)
		default:
			ch.CostFrom, ch.Trailer = http.CanonicalHeaderKey(name), kind == "trailer"
		}
		if r.Cost.Set {
			c.add(key+".cost", "is set with cost_from: the answer gives the cost")
		}
	}
	ch.Estimate = r.Estimate.Or(1)
	if r.Estimate.Set && r.Estimate.err == nil && (r.Estimate.V < 1 || r.Estimate.V > limiter.MaxCount) {
		c.add(key+".estimate", "%d: must be from 1 to %d", r.Estimate.V, limiter.MaxCount)
	}
	if r.EstimateFrom.Set {
		switch kind, name, _ := strings.Cut(r.EstimateFrom.V, ":"); {
		case r.EstimateFrom.V == "average":
			ch.EstimateAverage = true
		case kind == "header" && validHeaderName(name):
			ch.EstimateHeader = http.CanonicalHeaderKey(name)
		default:
			c.add(key+".estimate_from", "%q: write \"average\" (the key's running average) or \"header:NAME\" (a request header)", r.EstimateFrom.V)
		}
	}
	if !r.CostFrom.Set {
		for _, field := range chargeFields(r) {
			if field == "estimate" || field == "estimate_from" {
				c.add(key+"."+field, "applies with cost_from only (the estimate reserved until the answer gives the cost)")
			}
		}
	}
	if ch.Deferred() && alg == limiter.LeakyBucket {
		at := key + ".count"
		if r.Count == nil {
			at = key + ".cost_from"
		}
		c.add(at, "a leaky_bucket schedules each request as it is admitted; charge after the answer with another algorithm")
	}
	return ch
}

// chargeFields returns the keys of a limit that make it read the answer
// that are present, in the file's documented order.
func chargeFields(r *rawLimit) []string {
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"count", r.Count != nil}, {"cost_from", r.CostFrom.Set}, {"estimate", r.Estimate.Set}, {"estimate_from", r.EstimateFrom.Set}} {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

// validHeaderName reports whether s is an HTTP field name (an RFC 9110
// token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(s[i])) && !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i]|0x20 && s[i]|0x20 <= 'z') {
			return false
		}
	}
	return true
}

// setFields reports which keys of a limit table are present.
func setFields(r *rawLimit) map[string]bool {
	return map[string]bool{
		"name": r.Name.Set, "shared": r.Shared.Set, "key": r.Key.Set, "on_missing": r.OnMissing.Set,
		"algorithm": r.Algorithm.Set, "rate": r.Rate.Set, "burst": r.Burst.Set, "limit": r.Limit.Set,
		"window": r.Window.Set, "time_zone": r.TimeZone.Set, "slots": r.Slots.Set, "queue": r.Queue.Set, "max_wait": r.MaxWait.Set,
		"delay": r.Delay.Set, "cost": r.Cost.Set,
	}
}

// compileLimit validates one limit's algorithm and parameters through the
// limiter's constructors, after checking that it sets only what its
// algorithm takes, then applies check (the store's own) if not nil.
func compileLimit(r *rawLimit, key string, check func(limiter.Limit) error, c *collector) (limiter.Limit, bool) {
	if !r.Algorithm.Set {
		c.add(key+".algorithm", "is required")
		return limiter.Limit{}, false
	}
	alg, err := limiter.ParseAlgorithm(r.Algorithm.V)
	if err != nil {
		c.add(key+".algorithm", "%v", err)
		return limiter.Limit{}, false
	}
	takes := alg.Takes()
	present := setFields(r)
	bad := false
	var set []string
	for _, field := range []string{"rate", "burst", "limit", "window", "time_zone", "slots", "queue", "max_wait", "delay", "cost"} {
		if !present[field] {
			continue
		}
		set = append(set, field)
		if !contains(takes, field) {
			c.add(key+"."+field, "is not a parameter of %s (it takes %s)", alg, strings.Join(takes, ", "))
			bad = true
		}
	}
	for _, field := range alg.Requires() {
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
	if bad && r.Window.Calendar != 0 && !contains(takes, "time_zone") {
		// Said with the rest, not after they are fixed: NewLimit's
		// refusal of a calendar window for an algorithm without one.
		if _, err := limiter.NewLimit(limiter.Spec{Algorithm: alg, Calendar: r.Window.Calendar}); err != nil {
			if pe, ok := err.(*limiter.ParamError); ok && pe.Field == "window" {
				c.add(key+".window", "%s", pe.Msg)
			}
		}
	}
	if bad || valueErrors(r) {
		return limiter.Limit{}, false
	}
	// Each algorithm applies its defaults to the keys left unset (a
	// token bucket's burst one period of its rate, a leaky bucket's
	// max_wait its full queue's drain time, one slot); a key written as
	// 0 is 0.
	lim, err := limiter.NewLimit(limiter.Spec{Algorithm: alg, Rate: r.Rate.Rate, Burst: r.Burst.V, Limit: r.Limit.V,
		Window: r.Window.D, Calendar: r.Window.Calendar, TimeZone: r.TimeZone.Loc, Slots: r.Slots.Or(DefaultSlots), Queue: r.Queue.V, MaxWait: r.MaxWait.D, Delay: r.Delay.V,
		Cost: r.Cost.V, Set: set})
	if err == nil && check != nil {
		err = check(lim)
	}
	if err != nil {
		if pe, ok := err.(*limiter.ParamError); ok {
			c.add(key+"."+pe.Field, "%s", pe.Msg)
		} else {
			c.add(key, "%v", err)
		}
		return limiter.Limit{}, false
	}
	return compileAccuracy(r, key, lim, c)
}

// compileAccuracy applies a limit's accuracy key to lim.
func compileAccuracy(r *rawLimit, key string, lim limiter.Limit, c *collector) (limiter.Limit, bool) {
	switch a := r.Accuracy.Or(limiter.Exact.String()); a {
	case limiter.Exact.String():
		return lim, true
	case limiter.Bounded.String():
		if lim.Algorithm() == limiter.LeakyBucket {
			c.add(key+".accuracy", "%q: a leaky bucket's queue is one line, which instances cannot split between them; a leaky bucket is exact", a)
			return limiter.Limit{}, false
		}
		return lim.WithAccuracy(limiter.Bounded), true
	default:
		c.add(key+".accuracy", "%q: must be %q or %q", a, limiter.Exact.String(), limiter.Bounded.String())
		return limiter.Limit{}, false
	}
}

// valueErrors reports whether any value of a limit failed to decode (those
// errors are reported already).
func valueErrors(r *rawLimit) bool {
	return r.Algorithm.err != nil || r.Rate.err != nil || r.Burst.err != nil || r.Limit.err != nil ||
		r.Window.err != nil || r.TimeZone.err != nil || r.Slots.err != nil || r.Queue.err != nil || r.MaxWait.err != nil || r.Cost.err != nil ||
		r.Delay.err != nil || r.Key.err != nil || r.OnMissing.err != nil || r.Name.err != nil || r.Shared.err != nil ||
		r.Accuracy.err != nil
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
func compileMatch(m *rawMatch, key string, c *collector) Match {
	if m == nil {
		return Match{All: true}
	}
	var mt Match
	if m.RLSDomain.Set && m.RLSDomain.V == "" {
		c.add(key+".rls_domain", "is empty: name the domain Envoy's rate limit filter sends")
	}
	mt.RLSDomain = m.RLSDomain.V
	switch {
	case mt.RLSDomain != "" && len(m.Descriptor.V) == 0:
		c.add(key+".descriptor", "is required with rls_domain: one pattern (\"KEY\", \"KEY=VALUE\", \"KEY=/v1/*\") per descriptor entry")
	case mt.RLSDomain == "" && m.Descriptor.Set:
		c.add(key+".descriptor", "goes with rls_domain: it matches Envoy rate limit descriptors, not HTTP requests")
	case len(m.Descriptor.V) > 64:
		c.add(key+".descriptor", "%d patterns; at most 64", len(m.Descriptor.V))
	}
	for i, s := range m.Descriptor.V {
		d, err := parseDescriptorPattern(s)
		if err != nil {
			c.add(key+".descriptor", "element %d: %v", i, err)
			continue
		}
		mt.Descriptor = append(mt.Descriptor, d)
	}
	for i, h := range m.Hosts.V {
		// As requests' hosts are compared: lower case, without the
		// trailing dot of a fully qualified name.
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if h == "" || strings.Contains(h[1:], "*") || (strings.HasPrefix(h, "*") && !strings.HasPrefix(h, "*.")) {
			c.add(key+".hosts", "element %d: %q is not a host name or a wildcard such as \"*.example.com\"", i, h)
			continue
		}
		mt.Hosts = append(mt.Hosts, h)
	}
	for i, meth := range m.Methods.V {
		if meth == "" || strings.ToUpper(meth) != meth || strings.ContainsAny(meth, " \t/") {
			c.add(key+".methods", "element %d: %q is not an HTTP method in upper case", i, meth)
			continue
		}
		mt.Methods = append(mt.Methods, meth)
	}
	if m.Path.Set {
		if !strings.HasPrefix(m.Path.V, "/") {
			c.add(key+".path", "%q must start with /", m.Path.V)
		}
		mt.Path, mt.HasPath = m.Path.V, true
	}
	if m.PathPrefix.Set {
		if !strings.HasPrefix(m.PathPrefix.V, "/") {
			c.add(key+".path_prefix", "%q must start with /", m.PathPrefix.V)
		}
		mt.PathPrefix = m.PathPrefix.V
	}
	if m.PathRegex.Set {
		re, err := regexp.Compile(m.PathRegex.V)
		if err != nil {
			c.add(key+".path_regex", "%q is not a valid RE2 expression: %v", m.PathRegex.V, err)
		}
		mt.PathRegex = re
	}
	for name, v := range m.Headers {
		if !validToken(name) {
			c.add(key+".headers."+name, "%q is not a header name", name)
			continue
		}
		mt.Headers = append(mt.Headers, HeaderMatch{Name: canonicalHeader(name), Value: v.V, Any: v.V == "*"})
	}
	sortHeaders(mt.Headers)
	for path, v := range m.Claims {
		if !ClaimPath(path) {
			c.add(key+".claims", "%q is not a claim path (names joined by dots: \"plan\", \"org.tier\")", path)
			continue
		}
		mt.Claims = append(mt.Claims, ClaimMatch{Path: path, Value: v.V})
	}
	slices.SortFunc(mt.Claims, func(a, b ClaimMatch) int { return strings.Compare(a.Path, b.Path) })
	mt.All = !m.RLSDomain.Set && !m.Descriptor.Set && len(mt.Hosts) == 0 && len(mt.Methods) == 0 && !mt.HasPath && mt.PathPrefix == "" && mt.PathRegex == nil && len(mt.Headers) == 0 &&
		len(mt.Claims) == 0
	return mt
}

// hopByHop reports whether name (any case) is a header that a proxy
// removes or that frames the message, which therefore can never carry a
// client address to limitproxy.
func hopByHop(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Proxy-Authorization", "Proxy-Authenticate", "Content-Length", "Host":
		return true
	}
	return false
}

// fieldValue reports whether v can be a header field's value as it is
// (RFC 9110 §5.5): not empty, and no control character but the tab, so
// that every server writes it unchanged (net/http's HTTP/1 server would
// write CR and LF as spaces, its HTTP/2 server leave the field out).
func fieldValue(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// maxRLSExpJitter bounds [rls] expiration_jitter_max: a year, longer than
// any unit of the reference.
const maxRLSExpJitter = 8760 * time.Hour
