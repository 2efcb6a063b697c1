package config

import "time"

// Every default of the configuration, in one place: what a file that
// leaves a key out gets. Where nginx, Traefik or Envoy set a precedent, it
// is followed (the comments say which).
const (
	DefaultListen            = ":8080"
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultIPv6Prefix        = 64
	DefaultClientIPHeader    = "X-Forwarded-For" // nginx's real_ip_header, Envoy's xff
	MaxTrustedHops           = 32
	DefaultAdminListen       = "127.0.0.1:9091"
	// [forward_auth]: a leaky bucket's delay is waited up to 1 s, well
	// within nginx's proxy_read_timeout (60 s) and Traefik's and Caddy's
	// (none by default).
	DefaultForwardAuthMaxWait = time.Second
	DefaultMaxKeys            = 1_000_000
	DefaultLeaseTime          = time.Second // [store.leases] lease_time
	DefaultLeaseMaxShare      = 0.01        // [store.leases] max_share
	DefaultMinLease           = 8           // [store.leases] min_lease
	DefaultLeaseMaxKeys       = 100_000     // [store.leases] max_keys
	DefaultUpstreamTimeout    = 30 * time.Second
	DefaultMaxFails           = 3
	DefaultFailTimeout        = 10 * time.Second
	DefaultRedisTimeout       = 50 * time.Millisecond
	DefaultClientBodyTimeout  = 60 * time.Second // nginx's
	DefaultSendTimeout        = 60 * time.Second // nginx's
	DefaultMaxBodyBytes       = 16 << 20         // nginx's is 1 MiB; APIs upload more
	// [upstream.concurrency]: an adaptive limit starts at 4 and grows by
	// slow start (Netflix concurrency-limits starts at 20, Vector at 1);
	// the queue's bounds are HAProxy's order of magnitude (timeout queue
	// is commonly a few seconds; 1 s keeps a queued answer useful).
	DefaultAdaptiveStart    = 4
	DefaultMinLimit         = 1
	DefaultMaxLimit         = 1000
	DefaultConcQueue        = 1000
	DefaultConcMaxWait      = time.Second
	DefaultRateLimitHeaders = HeadersDraft
	// Refusing is the safe default: the proxy cannot know which of several
	// values its upstream reads.
	DefaultAmbiguousKeyParts = AmbiguousReject
	DefaultLogLevel          = LevelInfo
	DefaultLogFormat         = FormatJSON
	DefaultLogAccess         = true
	DefaultClientAddress     = ClientFull
	DefaultBackend           = BackendMemory
	DefaultRedisAddr         = "127.0.0.1:6379"
	DefaultRedisPrefix       = "limitproxy:"
	DefaultOnError           = OnErrorLocal
	DefaultACMECA            = "https://acme-v02.api.letsencrypt.org/directory"
	DefaultACMEStorage       = "./certs"
	DefaultOverridesFile     = ""    // in memory only: a file needs a place the operator chose
	DefaultHTTPListen        = ":80" // ACME HTTP-01 challenges and the redirect to HTTPS
	DefaultRequestBuffering  = true  // nginx's proxy_request_buffering
	// A request body must average 1 KiB/s over 20 s (Apache's
	// mod_reqtimeout: 20 s, then 500 bytes/s), and one client key may
	// stream 16 bodies at once to an upstream that takes streamed bodies.
	DefaultMinBodyRate      = 1024
	DefaultBodyRateWindow   = 20 * time.Second
	DefaultMaxStreamsPerKey = 16
	// A buffered answer: 64 KiB in memory (nginx's proxy_buffers 8 8k
	// plus proxy_buffer_size, and what a request body keeps in memory),
	// then up to 1 GiB on disk (nginx's proxy_max_temp_file_size).
	// All buffered answers together hold at most 64 MiB of memory and
	// 4 GiB of files.
	DefaultResponseBuffering    = true
	DefaultResponseBufferMemory = 64 << 10
	DefaultResponseBufferFile   = 1 << 30
	DefaultResponseBufferBudget = 64 << 20
	DefaultResponseBufferDisk   = 4 << 30
	DefaultMode                 = Enforce
	DefaultOnMissing            = MissingShared
	DefaultUpstreamProtocol     = ProtocolHTTP1
	// limitproxy's own HTTP/1.1 front and upstream transport: each saves
	// more than 15% of its path's CPU (BENCHMARKS.md).
	DefaultHTTP1        = ImplLimitproxy
	DefaultTransport    = ImplLimitproxy
	DefaultRejectStatus = 429
	DefaultUnmatched    = UnmatchedForward
	// DefaultBanMax is how long an escalating ban may grow; DefaultBanForget
	// how long an offence is remembered for escalation.
	DefaultBanMax            = 24 * time.Hour
	DefaultBanForget         = 24 * time.Hour
	DefaultRejectContentType = "application/problem+json"
	DefaultCustomContentType = "text/plain; charset=utf-8" // of a [policy.reject] body
	DefaultSlots             = 1                           // the two-window approximation
	// [rls]: bounds of one ShouldRateLimit call (docs/envoy.md).
	DefaultRLQSAssignmentTTL  = 10 * time.Second // [rlqs] assignment_ttl
	DefaultRLQSMaxShare       = 0.1              // [rlqs] max_share
	DefaultRLQSMaxBuckets     = 1000             // [rlqs] max_buckets
	DefaultRLQSMaxStreams     = 1024             // [rlqs] max_streams
	DefaultRLSMaxHitsAddend   = 1000
	DefaultRLSMaxDescriptors  = 64
	DefaultRLSMaxEntries      = 16
	DefaultRLSMaxMessageBytes = 64 << 10
	DefaultRLSMaxStreams      = 1024
	// [rls]: limitproxy's own answers, with the RateLimit fields; the
	// names of envoyproxy/ratelimit's headers are its defaults
	// (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER).
	DefaultRLSCompatibility   = CompatNone
	DefaultRLSResponseHeaders = RLSHeadersRateLimit
	DefaultRLSCountKeys       = CountKeysDistinct
	DefaultRLSLookup          = LookupDistinct
	DefaultRLSExpJitter       = time.Duration(0)
	DefaultRLSLimitHeader     = "RateLimit-Limit"
	DefaultRLSRemainingHeader = "RateLimit-Remaining"
	DefaultRLSResetHeader     = "RateLimit-Reset"
	// [identity]: the clock skew allowed on a token's times, and how
	// often a jwks_url is fetched again.
	DefaultIdentityLeeway  = 30 * time.Second
	DefaultIdentityRefresh = 10 * time.Minute
)

// identityAlgorithms are the "alg" values [identity] algorithms may
// allow: the asymmetric ones with a JWKS, the HMAC ones with secret_env.
var (
	identityAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
	identityHMAC       = []string{"HS256", "HS384", "HS512"}
)

// DefaultUpgrades are the protocols a client may upgrade to through an
// upstream that does not say: WebSocket only.
var DefaultUpgrades = []string{"websocket"}
