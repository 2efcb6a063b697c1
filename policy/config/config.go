package config

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// Config is a validated configuration file, with every default applied
// (see defaults.go). It holds no live objects: the policy package compiles
// it. It is immutable once Parse returns it, and safe to share.
type Config struct {
	File   string // path it was read from
	Hash   string // SHA-256 of the file, hex
	Server Server
	Admin  Admin
	// ForwardAuth is [forward_auth]: the decision endpoint nginx,
	// Traefik and Caddy ask; off when its Listen is "".
	ForwardAuth ForwardAuth
	Log         Log
	Store       Store
	RLS         RLS
	RLQS        RLQS
	// Identity is [identity]: how a request's JWT is verified, for the
	// jwt:CLAIM key parts and claims match conditions; nil without one.
	Identity  *Identity
	Upstreams []Upstream
	Policies  []Policy

	at map[string]pos // where each key is written in File
}

// Errorf returns an error about the value at key path key of c
// ("server.tls.cert_file", "admin.token_env"), placed at the key's
// file:line:col as Parse's errors are (at the nearest enclosing table
// written in the file, else without a position). Collected into Errors,
// they print as `limitproxy check` prints every error.
func (c *Config) Errorf(key, format string, args ...any) *Error {
	col := collector{file: c.File, at: c.at}
	col.add(key, format, args...)
	return col.errs[0]
}

// Server is [server].
type Server struct {
	Listen            string
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration
	MaxHeaderBytes    int
	// MaxConnections bounds the proxy listener's open client connections;
	// 0 means derived at start from the process's file-descriptor limit
	// and memory limit (see DefaultMaxConnections and
	// MemoryMaxConnections in package server).
	MaxConnections int
	// TrustedProxies are the peers whose ClientIPHeader is believed;
	// empty: none, every request is keyed by its peer's address.
	TrustedProxies []netip.Prefix
	// ClientIPHeader is the one request header (canonical name) that
	// carries the client address behind a trusted proxy: a list walked
	// from the right (X-Forwarded-For, the default; a named header such
	// as X-Real-IP or CF-Connecting-IP), or RFC 7239 Forwarded, whose
	// elements' for= values make the list. No other forwarding header
	// changes a client address. "" (a Server not made by Parse) means
	// X-Forwarded-For.
	ClientIPHeader string
	// TrustedHops, when above zero, picks the client address as the
	// TrustedHops-th element from the right of ClientIPHeader (Envoy's
	// xff_num_trusted_hops): the number of proxies in front, the peer
	// included, that each append to the header. Fewer elements, or that
	// element not an address: the peer's address. Zero walks past the
	// elements inside TrustedProxies instead.
	TrustedHops      int
	IPv6Prefix       int         // bits of an IPv6 client address that make its key
	RateLimitHeaders HeadersMode // which rate-limit fields responses carry
	// AmbiguousKeyParts is what becomes of a request whose keyed cookie or
	// query parameter is repeated or malformed: refused with 400, or
	// forwarded with only the value it was keyed by.
	AmbiguousKeyParts AmbiguousMode
	// UnderscoresInHeaders forwards request headers whose names hold an
	// underscore; by default they are dropped, as nginx does.
	UnderscoresInHeaders bool
	// CaseSensitivePaths says that every upstream routes paths with
	// regard to case. By default (false) limitproxy assumes one may not
	// (Express, ASP.NET Core, IIS), and refuses a path whose lower-case
	// reading another policy would match (docs/security-model.md).
	CaseSensitivePaths bool
	// ClientBodyTimeout is the time allowed between two reads of a
	// request body; SendTimeout between two writes of a response to the
	// client (nginx's client_body_timeout and send_timeout).
	ClientBodyTimeout, SendTimeout time.Duration
	// TempDir is where request bodies and responses that do not fit in
	// memory are spooled, in files unlinked as soon as they are made. It
	// must exist and be writable (checked at start). Default
	// os.TempDir(): $TMPDIR, else /tmp.
	TempDir string
	// ResponseBufferBudget bounds, in bytes, the memory all buffered
	// responses hold at once, every upstream together; past it they spill
	// to TempDir.
	ResponseBufferBudget int64
	// ResponseBufferDisk bounds, in bytes, what all buffered responses
	// hold in their files in TempDir at once; an answer that finds it
	// spent stops buffering and passes the rest on as its client reads,
	// holding its upstream connection and slot. 0: no response file.
	ResponseBufferDisk int64
	// ProxyProtocol makes the proxy listener read a PROXY protocol (v1
	// or v2) header, before TLS, from peers in ProxyProtocolFrom: they
	// must send one, and the address it carries becomes the connection's
	// remote address; a header from any other peer is refused. A LOCAL or
	// UNKNOWN header keeps the sender as the peer, and no forwarding
	// header of that connection is believed.
	ProxyProtocol bool
	// ProxyProtocolFrom are the peers that may (and must) send a PROXY
	// header; unset, TrustedProxies.
	ProxyProtocolFrom []netip.Prefix
	// H2C makes the plain-text proxy listener accept HTTP/2 with prior
	// knowledge as well as HTTP/1.1 (gRPC clients without TLS). With TLS,
	// HTTP/2 is negotiated by ALPN whatever it says.
	H2C bool
	// HTTP1 is whose server reads plain-HTTP/1.1 requests on the proxy
	// listener: limitproxy's front (internal/h1), which answers the
	// cheap refusals (429, over max_connections) itself and hands the
	// rest to net/http's server, or net/http's alone. TLS listeners are
	// always net/http's.
	HTTP1 Implementation
	// Unmatched is what becomes of a request no policy matches:
	// UnmatchedForward (the default) forwards it, counted against no
	// limit, to UnmatchedUpstream; UnmatchedRefuse answers it 404.
	Unmatched Unmatched
	// UnmatchedUpstream is the upstream a request no policy matches is
	// forwarded to: [server] unmatched_upstream, else the only
	// [[upstream]] when there is exactly one; "" when there is none to
	// forward to (with UnmatchedRefuse, or several upstreams and none
	// named): such a request is answered 404.
	UnmatchedUpstream string
	TLS               *TLS // nil: plain HTTP
}

// Unmatched is [server] unmatched.
type Unmatched string

// The unmatched settings.
const (
	UnmatchedForward Unmatched = "forward" // forwarded unlimited, as nginx, Traefik and Caddy pass what no limit names
	UnmatchedRefuse  Unmatched = "refuse"  // 404: every request must match a policy
)

// TLS is [server.tls].
type TLS struct {
	Mode                                                      TLSMode
	Domains                                                   []string
	Email, CA, CARoot, Storage, HTTPListen, CertFile, KeyFile string
}

// Admin is [admin].
type Admin struct {
	Listen   string // "" disables the admin listener
	TokenEnv string
	// RawTopKeys shows the top offenders' client keys as they are rather
	// than hashed (GET /api/v1/top).
	RawTopKeys bool
	// AllowedHosts are the names, beyond an address or localhost, a
	// request's Host may give to reach the admin listener: "name" (any
	// port) or "name:port", in lower case without a trailing dot. Empty:
	// none (the listen address and loopback names only).
	AllowedHosts []string
	// KeyHashSecretEnv names the environment variable holding the secret
	// under which client keys are shown hashed (the admin API's lists,
	// replay, a hashed client address in the access log): the same key
	// then shows the same hash across restarts and instances. "": a
	// secret drawn at each start.
	KeyHashSecretEnv string
}

// ForwardAuth is [forward_auth]: a listener that answers whether a
// request another proxy received may pass (nginx auth_request, Traefik
// forwardAuth, Caddy forward_auth), decided by the proxy's policies
// without forwarding anything (docs/forward-auth.md).
type ForwardAuth struct {
	// Listen is the endpoint's address; "" (the default) turns it off.
	Listen string
	// TrustedSenders are the peers whose description of the original
	// request (X-Forwarded-Method, X-Forwarded-Uri, X-Forwarded-Host,
	// X-Original-Method, X-Original-URI, X-Forwarded-Proto) is believed,
	// and whose client_ip_header is read as a trusted proxy's. Another
	// peer is decided as the request it sent. Never empty when Listen
	// is set.
	TrustedSenders []netip.Prefix
	// DenyStatus, 401 or 403, replaces the status of every refusal by
	// a limit or a ban (nginx's auth_request passes only those); 0 (the
	// default): the policy's own (reject.status, ban.status), as the
	// proxy answers.
	DenyStatus int
	// MaxWait is the longest a leaky bucket's delay the endpoint waits
	// before it answers 2xx; a longer delay is refused as over the
	// limit. 0: every delay is refused.
	MaxWait time.Duration
}

// Identity is [identity]: the one verifier of a configuration's JWTs
// (docs/identity.md). Exactly one key source is set: JWKSFile, JWKSURL or
// SecretEnv. A reload builds a new verifier from it.
type Identity struct {
	JWKSFile string
	JWKSURL  string
	// SecretEnv names the environment variable holding an HS256 secret;
	// the secret itself never goes in the file.
	SecretEnv string
	// Algorithms is the allow-list of the "alg" a token may name; nil:
	// the verifier's defaults (RS256, ES256, EdDSA with a JWKS; HS256
	// with a secret).
	Algorithms []string
	Issuer     string   // "": any
	Audience   []string // empty: any
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway time.Duration
	// RefreshInterval is how often JWKSURL is fetched again.
	RefreshInterval time.Duration
	// Header or Cookie, at most one set, is where the token is; both "":
	// the Authorization header's Bearer credentials.
	Header, Cookie string
}

// RLS is [rls]: Envoy's rate limit service (docs/envoy.md). Every
// field needs a restart.
type RLS struct {
	// Listen is the gRPC listener's address; "" turns the service off.
	Listen string
	// CertFile and KeyFile, both set, serve TLS; both "": h2c.
	CertFile, KeyFile string
	// ClientCAFile, with TLS, requires each client to present a
	// certificate signed by one of its PEM certificates (mutual TLS);
	// "": any client.
	ClientCAFile string
	// MaxHitsAddend is the largest cost one descriptor may ask for; a
	// call asking more is refused whole.
	MaxHitsAddend int64
	// MaxDescriptors is the most descriptors one call may carry, and
	// MaxEntries the most entries one descriptor may carry.
	MaxDescriptors, MaxEntries int
	// MaxMessageBytes is the largest request message read, in bytes.
	MaxMessageBytes int
	// MaxConcurrentStreams bounds the calls in flight per connection.
	MaxConcurrentStreams int
	// Compatibility says whose answers the service gives: limitproxy's
	// own (CompatNone), or envoyproxy/ratelimit's in every field
	// (CompatEnvoy: every hit counted, rejected or not; a descriptor's
	// limit applied; docs/envoy.md, "Migrating from envoyproxy/ratelimit").
	Compatibility Compatibility
	// ResponseHeaders says which response fields an answer asks Envoy to
	// add: the RateLimit fields ([server] rate_limit_headers) and
	// Retry-After, envoyproxy/ratelimit's three headers (named
	// LimitHeader, RemainingHeader and ResetHeader), or none.
	ResponseHeaders                           RLSHeaders
	LimitHeader, RemainingHeader, ResetHeader string
	// ShadowMode answers every call OK overall, whatever its descriptors'
	// statuses say (envoyproxy/ratelimit's SHADOW_MODE); QuotaMode makes
	// every descriptor a quota (its QUOTA_MODE): see Policy.QuotaMode.
	ShadowMode, QuotaMode bool
	// StopIncrementWhenOverLimit is envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, with CompatEnvoy only: the
	// counts of a call are read first; when a descriptor's hits would take
	// its count past its limit, only such descriptors are counted, the
	// others are answered by their count as it is.
	StopIncrementWhenOverLimit bool
	// DynamicMetadata sends an answer's dynamic_metadata as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: the domain,
	// the descriptors, the call's hits_addend, and the metadata of the
	// policies of the descriptors not over their limit, merged.
	DynamicMetadata bool
	// CountKeys says how a descriptor's count is named with CompatEnvoy:
	// by its domain, keys and values kept apart (CountKeysDistinct), or
	// joined with '_' as envoyproxy/ratelimit names its Redis keys
	// (CountKeysJoined), so that descriptors whose joins are equal share
	// one count.
	CountKeys CountKeys
	// Lookup says how a descriptor finds its policy: the first of its
	// domain whose patterns match its entries, keys and values compared
	// apart (LookupDistinct), or, with CompatEnvoy, as
	// envoyproxy/ratelimit looks it up in its tree of descriptors, by
	// each entry's KEY_VALUE joined with '_' (LookupJoined; the policies
	// are that tree's descriptors: policy.Set.MatchDescriptor).
	Lookup Lookup
	// ExpirationJitterMax is envoyproxy/ratelimit's
	// EXPIRATION_JITTER_MAX_SECONDS, with CompatEnvoy: each addition to a
	// count named by descriptor sets its expiry to its unit and a random
	// whole number of seconds from 0 to this less one; 0, none.
	ExpirationJitterMax time.Duration
	// Domains are domains the service knows beside those its RLS
	// policies name: a descriptor's own limit applies, with CompatEnvoy,
	// in a known domain only.
	Domains []string
}

// RLQS is [rlqs]: Envoy's rate limit quota service (docs/envoy.md,
// "Envoy's rate limit quota service (RLQS)"), served from the RLS
// policies. Every key needs a restart.
type RLQS struct {
	// Listen is the gRPC listener's address; "" turns the service off.
	Listen string
	// CertFile, KeyFile and ClientCAFile are as [rls]'s.
	CertFile, KeyFile, ClientCAFile string
	// AssignmentTTL is a token bucket assignment's time to live (whole
	// seconds: Envoy reads no more), and the least a DENY_ALL's lasts.
	AssignmentTTL time.Duration
	// MaxShare is the largest lease one Envoy gets for one bucket, a
	// fraction of the limit's quota: the bound is proportional to it.
	MaxShare float64
	// MaxBuckets bounds the buckets one stream reports; MaxStreams the
	// streams served at once.
	MaxBuckets, MaxStreams int
}

// Compatibility is [rls] compatibility.
type Compatibility string

// The compatibility values.
const (
	CompatNone  Compatibility = "none"
	CompatEnvoy Compatibility = "envoyproxy/ratelimit"
)

// CountKeys is [rls] count_keys.
type CountKeys string

// The count_keys values.
const (
	// CountKeysDistinct names a count by the domain and each key and
	// value apart: two descriptors share a count only when they are the
	// same.
	CountKeysDistinct CountKeys = "distinct"
	// CountKeysJoined names it as envoyproxy/ratelimit names its Redis
	// key: the domain, keys and values joined with '_', so that key "a"
	// with value "b_c" and key "a_b" with value "c" share one count.
	CountKeysJoined CountKeys = "joined"
)

// Lookup is [rls] lookup.
type Lookup string

// The lookup values.
const (
	// LookupDistinct finds a descriptor's policy as the first of its
	// domain, in file order, whose patterns match its entries one by one,
	// each entry's key and value compared apart.
	LookupDistinct Lookup = "distinct"
	// LookupJoined finds it as envoyproxy/ratelimit's lookup does: the
	// domain's policies are read as the reference's tree of descriptors
	// (each policy's patterns a path in it), and at each level an
	// entry's KEY_VALUE finds the descriptor whose KEY_VALUE (or bare
	// KEY) it equals, else the first wildcard that matches it, else the
	// descriptor of its bare key; so key "a_b" with value "c" finds
	// "a=b_c", as it does there.
	LookupJoined Lookup = "joined"
)

// RLSHeaders is [rls] response_headers.
type RLSHeaders string

// The response_headers values.
const (
	// RLSHeadersRateLimit adds the RateLimit fields ([server]
	// rate_limit_headers) of one descriptor, and Retry-After when over.
	RLSHeadersRateLimit RLSHeaders = "ratelimit"
	// RLSHeadersEnvoy adds envoyproxy/ratelimit's three headers
	// (LIMIT_RESPONSE_HEADERS_ENABLED): the limit, what remains and the
	// seconds to its reset, of the descriptor closest to its limit.
	RLSHeadersEnvoy RLSHeaders = "envoy"
	// RLSHeadersNone adds none, as envoyproxy/ratelimit by default.
	RLSHeadersNone RLSHeaders = "none"
)

// Log is [log].
type Log struct {
	Level  LogLevel
	Format LogFormat
	Access bool
	// AccessReplay adds to the access log what `limitproxy replay` needs
	// to decide each request again exactly: when it arrived, its client
	// address, its target, and the request headers and token claims the
	// policies match or key on, whole (ReplayWhole) or, where a key only
	// needs them equal, as keyed hashes (ReplayHashed); ReplayOff: none.
	AccessReplay AccessReplay
	// ClientAddress is how the access log shows the client address:
	// whole, masked to its network, or hashed.
	ClientAddress ClientAddress
	// File is the file the log is appended to; "" writes it to stderr.
	// AccessFile is the access log's own file; "" writes the access log
	// where the log goes. Both are reopened on SIGUSR1, for rotation.
	File, AccessFile string
}

// ClientAddress is [log] client_address.
type ClientAddress string

// The values of [log] client_address.
const (
	// ClientFull logs the client address as the policies' ip key part
	// resolves it.
	ClientFull ClientAddress = "full"
	// ClientMasked logs its network: an IPv4 address's /24, an IPv6
	// address's /48, in CIDR notation ("203.0.113.0/24").
	ClientMasked ClientAddress = "masked"
	// ClientHashed logs 16 hex digits of a keyed hash of it (the admin
	// key hash secret's).
	ClientHashed ClientAddress = "hashed"
)

// AccessReplay is [log] access_replay.
type AccessReplay string

// The values of [log] access_replay.
const (
	// ReplayOff (false, the default) logs nothing for replay.
	ReplayOff AccessReplay = ""
	// ReplayWhole (true, "whole") logs the target and each header and
	// claim the policies read as they are.
	ReplayWhole AccessReplay = "whole"
	// ReplayHashed ("hashed") logs a value the policies only key on (a
	// header, cookie, query parameter or claim) as its keyed hash under
	// the key hash secret, and only the cookies and query parameters the
	// keys read; values they match on are logged as they are.
	ReplayHashed AccessReplay = "hashed"
)

// Store is [store].
type Store struct {
	Backend Backend
	MaxKeys int
	Redis   Redis
	// OverridesFile is where the memory backend keeps the per-key
	// overrides the admin API sets; "" keeps them in memory only.
	OverridesFile string
	// Leases is [store.leases], the global tier of limits with accuracy
	// "bounded" (Redis only).
	Leases Leases
}

// Leases is [store.leases]: how the global tier (limiter/leases) leases
// the keys of limits with accuracy "bounded".
type Leases struct {
	LeaseTime time.Duration // lease_time: a lease's life, and the rate's period
	MaxShare  float64       // max_share: the largest lease, a fraction of the quota
	MinLease  int64         // min_lease: the smallest lease; slower keys stay exact
	MaxKeys   int           // max_keys: the keys tracked
}

// Redis is [store.redis].
type Redis struct {
	Addrs                             []string
	MasterName, Username, PasswordEnv string
	DB                                int
	TLS                               bool
	Timeout                           time.Duration
	Prefix                            string
	OnError                           OnError
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
	// Protocol is how requests are forwarded to http:// targets:
	// HTTP/1.1, or HTTP/2 with prior knowledge (h2c, for gRPC backends
	// without TLS). https:// targets negotiate by ALPN.
	Protocol UpstreamProtocol
	// Transport is whose client sends requests to HTTP/1.1 targets:
	// limitproxy's (a request without a body, upgrade or TE written on
	// the handler's goroutine; the rest through http.Transport), or
	// net/http's http.Transport for every request. h2c is always
	// http.Transport's.
	Transport Implementation
	// Buffering reads a request's whole body before an upstream
	// connection is taken (nginx's proxy_request_buffering). false says
	// that the upstream takes streamed request bodies (gRPC client
	// streams): only then does a body reach it while it arrives. No
	// request header changes this.
	Buffering bool
	// MaxBodyBytes is the largest request body forwarded; larger ones get
	// 413.
	MaxBodyBytes int64
	// MinBodyRate is the slowest a request body, buffered or streamed,
	// may arrive, in bytes per second averaged over RateWindow; a slower
	// one gets 408. Time the proxy is not waiting for the client (an
	// upstream taking a streamed body slowly) does not count. 0: no
	// minimum, only ClientBodyTimeout between two reads.
	MinBodyRate int64
	// RateWindow is the averaging window of MinBodyRate, and the grace a
	// body has before the rate applies: a client that sends nothing is cut
	// RateWindow after its last full-rate moment.
	RateWindow time.Duration
	// MaxStreamsPerKey is the most requests of one client key whose bodies
	// stream to this upstream at once (with Buffering off); one more gets
	// 429 with Retry-After. At least 1.
	MaxStreamsPerKey int
	// ResponseBuffering reads the upstream's answer as fast as it comes,
	// into memory (up to ResponseBufferMemory bytes) and then into an
	// unlinked file in [server] temp_dir (up to ResponseBufferFile bytes),
	// so that the upstream connection and its concurrency slot are freed
	// when the upstream is done rather than when the client is (nginx's
	// proxy_buffering). Answers that must stream are never buffered.
	ResponseBuffering bool
	// ResponseBufferMemory and ResponseBufferFile are a buffered answer's
	// bounds in bytes, in memory and on disk; past both, the rest is
	// passed on as the client takes it.
	ResponseBufferMemory, ResponseBufferFile int64
	// Concurrency limits the requests in flight to the upstream, all its
	// targets together; nil: no limit.
	Concurrency *Concurrency
}

// Concurrency is an upstream's [upstream.concurrency]: a fixed limit on
// the requests in flight (HAProxy's maxconn) or an adaptive one, with a
// queue in front (docs/concurrency.md).
type Concurrency struct {
	// Limit is the fixed limit; with Adaptive, the limit to start from.
	Limit int
	// Adaptive learns the limit, between MinLimit and MaxLimit, from the
	// latency and errors of the upstream's answers.
	Adaptive           bool
	MinLimit, MaxLimit int
	// Queue is the most requests waiting for a slot, MaxWait the longest
	// one waits (then 503).
	Queue   int
	MaxWait time.Duration
	// FairShare hands slots round-robin to the client keys waiting.
	FairShare bool
	// Mode is Enforce or Shadow (decide and count, never hold or shed).
	Mode Mode
	// Classes are the priority classes, highest first, DefaultClass among
	// them (last unless listed elsewhere); nil: none, every request alike.
	Classes []Class
}

// Class is a priority class of an upstream's concurrency limit.
type Class struct {
	Name string
	// Reserve is the share of the limit, from 0 to below 1, kept for the
	// class's requests alone.
	Reserve float64
}

// DefaultClass is the class of the requests of a policy that names none.
const DefaultClass = "default"

// MaxClasses is the most priority classes an upstream may have.
const MaxClasses = 16

// Implementation is whose code does a part of the HTTP stack that
// limitproxy has its own of: [server] http1 and [[upstream]] transport.
// limitproxy's is the default where it measured cheaper (BENCHMARKS.md);
// net/http's is the reference, there to fall back on.
type Implementation string

// The implementations.
const (
	ImplLimitproxy Implementation = "limitproxy" // limitproxy's own
	ImplNetHTTP    Implementation = "net/http"   // the standard library's
)

// UpstreamProtocol is an upstream's protocol setting.
type UpstreamProtocol string

// The upstream protocols.
const (
	ProtocolHTTP1 UpstreamProtocol = "http1" // HTTP/1.1 to http:// targets
	ProtocolH2C   UpstreamProtocol = "h2c"   // HTTP/2 with prior knowledge to http:// targets
)

// Mode is a policy's mode.
type Mode string

// The modes.
const (
	Enforce Mode = "enforce"
	Shadow  Mode = "shadow" // decide and count, never reject or delay
)

// OnMissing says what a policy (or a limit with a key of its own) does
// with a request that lacks a key part.
type OnMissing string

// The on_missing behaviours (docs/configuration.md).
const (
	MissingShared OnMissing = "shared" // the absent part is one shared value
	MissingIP     OnMissing = "ip"     // key the request by its client IP instead
	MissingSkip   OnMissing = "skip"   // the limits keyed so do not count the request, as nginx does for an empty key
	MissingReject OnMissing = "reject" // answer 400
	// MissingUnauthorized answers 401 with WWW-Authenticate: Bearer
	// (RFC 6750) a request whose jwt: part is absent (no valid token),
	// and 400 one lacking another part; only for a key with a jwt: part.
	MissingUnauthorized OnMissing = "unauthorized"
)

// Policy is one validated [[policy]], not yet bound to a store.
type Policy struct {
	Name      string
	Index     int // position in the file
	Upstream  string
	Mode      Mode
	Key       []KeyPart
	OnMissing OnMissing
	Match     Match
	Limits    []limiter.Limit
	// LimitNames holds, for each of Limits, the name it goes by in the
	// RateLimit fields (its quota policy item): the limit's name key, its
	// [[shared_limit]]'s name, or one derived (see LimitName). Parse
	// fills it; nil or short in a Policy built by hand.
	LimitNames []string
	// LimitKeys holds, for each of Limits, the key it counts requests
	// under: the policy's Key and OnMissing, or the limit's own (or its
	// shared limit's). OwnKeys is set when any differs from the policy's.
	LimitKeys []LimitKey
	OwnKeys   bool
	Reject    Reject
	// Concurrency limits the requests in flight per client key (the
	// policy's Key); nil: none.
	Concurrency *PolicyConcurrency
	// Class is the index of the policy's priority class among its
	// upstream's Concurrency.Classes, ClassName its name; 0 and "" when
	// the upstream has no classes.
	Class     int
	ClassName string
	// Charges holds, for each of Limits, when and how much it is
	// charged, when that is not at once by the request's cost; nil when
	// no limit of the policy reads the answer.
	Charges []Charge
	// Ban is the policy's penalty box; nil: none.
	Ban *Ban
	// RLS holds what only an RLS policy (Match.RLSDomain) may have.
	RLS RLSPolicy
}

// RLSPolicy is what only an RLS policy has (docs/envoy.md).
type RLSPolicy struct {
	// Unlimited answers each descriptor the policy matches OK with
	// limit_remaining 4294967295, counting nothing (envoyproxy/
	// ratelimit's unlimited: true); the policy has no limits then. An RLS
	// policy with neither limits nor Unlimited answers OK without a
	// limit, as a descriptor of the reference's without rate_limit.
	Unlimited bool
	// QuotaMode makes the policy's descriptors quotas: one over its limit
	// is OVER_LIMIT in its status, but the call is OVER_LIMIT only when
	// every quota descriptor of it is (and no other one is).
	QuotaMode bool
	// Replaces names limits (their name key): a descriptor of the same
	// call whose policy has a limit of one of these names is not decided
	// at all (OK, no limit, nothing counted), as envoyproxy/ratelimit's
	// replaces.
	Replaces []string
	// Metadata is sent, with [rls] dynamic_metadata, in the
	// dynamic_metadata of an answer where a descriptor of the policy has
	// a limit and is not over it (envoyproxy/ratelimit's metadata); nil
	// for none. Read only.
	Metadata map[string]any
	// ValueToMetric, when not nil, holds the indexes of the descriptor
	// patterns whose descriptor has envoyproxy/ratelimit's
	// value_to_metric: with compatibility, Metadata is then sent only
	// when the reference's value_to_metric key of the entries found is
	// the descriptor's own (its GetLimit makes the limit anew, without
	// metadata, otherwise): an entry of such a pattern with a value found
	// by its bare key, or through a wildcard, drops it; so does, under
	// [rls] lookup = "joined", any entry found through a wildcard of a
	// shorter key. nil: Metadata is sent as it is.
	ValueToMetric []int
	// Names holds, for each of Limits, its name key ("" for none): what
	// Replaces names, and, with [rls] compatibility, the name an answer's
	// current_limit carries.
	Names []string
	// Zero holds, for each of Limits, whether the file's limit is 0: a
	// fixed window that admits nothing (the reference's
	// requests_per_unit: 0). Such a limit is bound with a limit of 1, for
	// its state; the service decides it. nil when none is.
	Zero []bool
}

// Quota returns limit i's quota and period: Limits[i].Quota(), but 0 for
// a limit of 0 (RLS.Zero).
func (p *Policy) Quota(i int) (int64, time.Duration) {
	q, w := p.Limits[i].Quota()
	if i < len(p.RLS.Zero) && p.RLS.Zero[i] {
		q = 0
	}
	return q, w
}

// Charge says how a limit that reads the upstream's answer is charged
// (docs/response-limits.md). The zero Charge is an ordinary limit: the
// request's cost, charged when it is admitted.
type Charge struct {
	// Count, if not nil, charges the limit only for answers it matches;
	// every request is checked against the limit before it is forwarded
	// (one over its limit is rejected), and charged the limit's cost (or
	// its CostFrom) when its answer matches.
	Count *CountRule
	// CostFrom is the response header (or, with Trailer, trailer) whose
	// value, a whole number, is the request's cost; "" for none.
	CostFrom string
	Trailer  bool
	// Estimate is the cost reserved before the request is forwarded when
	// CostFrom is set (at least 1): the configured value, and the
	// fallback of EstimateHeader and EstimateAverage.
	Estimate int64
	// EstimateHeader is a request header whose value is the estimate;
	// "" for none.
	EstimateHeader string
	// EstimateAverage reserves the running average of the key's costs.
	EstimateAverage bool
}

// Deferred reports whether c charges after the answer rather than at
// admission.
func (c Charge) Deferred() bool { return c.Count != nil || c.CostFrom != "" }

// CountRule is a limit's count: which answers it charges. Every condition
// given must hold.
type CountRule struct {
	// Status are the statuses counted; empty: any.
	Status []StatusRange
	// Header is a response header that must be present; "": none.
	Header string
}

// Matches reports whether an answer with status and header hdr counts.
func (c *CountRule) Matches(status int, hdr http.Header) bool {
	if len(c.Status) > 0 {
		in := false
		for _, r := range c.Status {
			if status >= r.Lo && status <= r.Hi {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	return c.Header == "" || len(hdr.Values(c.Header)) > 0
}

// StatusRange is a status (Lo == Hi) or a class such as 4xx (400–499).
type StatusRange struct{ Lo, Hi int }

// Ban is a policy's [policy.ban]: a client key that a limit of the policy
// rejects is refused for Duration without reaching the upstream; each new
// offence within ForgetAfter of the last multiplies the ban by Escalation,
// up to MaxDuration.
type Ban struct {
	Duration    time.Duration
	Escalation  int64 // ≥ 1; 1: every ban lasts Duration
	MaxDuration time.Duration
	ForgetAfter time.Duration
	Status      int  // 429 or 403
	Shadow      bool // count and log bans, never refuse a request for one
}

// PolicyConcurrency is a policy's [policy.concurrency]: at most Limit
// requests of one client key in flight at once (nginx's limit_conn,
// Traefik's inFlightReq), up to Queue more waiting at most MaxWait for
// one to end; the rest get the policy's reject status.
type PolicyConcurrency struct {
	Limit   int64
	Queue   int
	MaxWait time.Duration
}

// LimitKey is the client key one limit counts requests under.
type LimitKey struct {
	Parts     []KeyPart
	OnMissing OnMissing
}

// Equal reports whether k and o build the same key from every request.
func (k LimitKey) Equal(o LimitKey) bool {
	if k.OnMissing != o.OnMissing || len(k.Parts) != len(o.Parts) {
		return false
	}
	for i := range k.Parts {
		if k.Parts[i] != o.Parts[i] {
			return false
		}
	}
	return true
}

// String describes k as the configuration writes it, e.g.
// "[ip header:X-Api-Key] on_missing=shared".
func (k LimitKey) String() string {
	parts := make([]string, len(k.Parts))
	for i, p := range k.Parts {
		parts[i] = p.String()
	}
	return "[" + strings.Join(parts, " ") + "] on_missing=" + string(k.OnMissing)
}

// Reject is [policy.reject]: what a rejected request gets.
type Reject struct {
	Status      int
	Body        string // "" means the problem+json body of docs/responses.md
	ContentType string
}

// HeadersMode is [server] rate_limit_headers: which rate-limit fields
// responses carry.
type HeadersMode string

// The rate_limit_headers modes.
const (
	HeadersDraft  HeadersMode = "draft"  // IETF draft-11 RateLimit-Policy and RateLimit
	HeadersLegacy HeadersMode = "legacy" // X-RateLimit-Limit, -Remaining, -Reset
	HeadersBoth   HeadersMode = "both"
	HeadersNone   HeadersMode = "none"
)

// AmbiguousMode is [server] ambiguous_key_parts: what becomes of a
// request whose keyed cookie or query parameter appears more than once,
// or is malformed, so that upstreams could read another value than the
// one the request was keyed by.
type AmbiguousMode string

// The ambiguous_key_parts modes.
const (
	// AmbiguousReject answers such a request 400.
	AmbiguousReject AmbiguousMode = "reject"
	// AmbiguousRewrite keys it by the last well-formed value and forwards
	// the request with that value only: every other occurrence of the
	// cookie or parameter is removed from the Cookie fields or the query.
	AmbiguousRewrite AmbiguousMode = "rewrite"
)

// TLSMode is [server.tls] mode.
type TLSMode string

// The TLS modes.
const (
	TLSACME  TLSMode = "acme"  // certificates obtained and renewed by certmagic
	TLSFiles TLSMode = "files" // certificate and key files, reloaded when they change
)

// LogLevel is [log] level.
type LogLevel string

// The log levels.
const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// LogFormat is [log] format.
type LogFormat string

// The log formats.
const (
	FormatJSON    LogFormat = "json"
	FormatConsole LogFormat = "console"
)

// Backend is [store] backend.
type Backend string

// The store backends.
const (
	BackendMemory Backend = "memory" // embedded, in this process
	BackendRedis  Backend = "redis"
)

// OnError is [store.redis] on_error: what a decision does when Redis does
// not answer in time.
type OnError string

// The on_error behaviours.
const (
	OnErrorLocal OnError = "local" // decide with the in-memory store
	OnErrorAllow OnError = "allow"
	OnErrorDeny  OnError = "deny"
)
