package identity

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The defaults of the Config fields left zero.
const (
	DefaultLeeway          = 30 * time.Second
	DefaultRefreshInterval = 10 * time.Minute
	DefaultFetchTimeout    = 5 * time.Second
	DefaultMinRefetch      = 30 * time.Second
	DefaultCacheSize       = 10000
)

// Config says where a request's token is, which keys and algorithms may
// verify it, and what its claims must say. It is a plain value: New reads
// it and keeps a copy. The zero value is not usable: a key source
// (JWKSFile, JWKSURL or Secret) is required.
type Config struct {
	// Source is where the token is read from; its zero value reads the
	// Authorization header's Bearer credentials.
	Source Source

	// JWKSFile is the path of a JWK Set (RFC 7517 §5) of public keys, read
	// once by New. Set at most one of JWKSFile and JWKSURL.
	JWKSFile string
	// JWKSURL is where a JWK Set of public keys is fetched from: by New,
	// then every RefreshInterval, and when a token names a kid the set
	// does not have (at most once per MinRefetch). It must be https, or
	// http to a loopback address (a sidecar): keys fetched in the clear
	// over a network could be anyone's.
	JWKSURL string

	// Secret is the shared secret of HS256 (HS384, HS512) tokens: at
	// least as many bytes as the hash's output (32, 48, 64; RFC 7518
	// §3.2). HMAC tokens are verified with it alone, never with a key of
	// a JWKS, whatever their kid.
	Secret []byte

	// Algorithms is the allow-list of the "alg" a token may name: RS256,
	// RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA (with
	// a JWKS) and HS256, HS384, HS512 (with Secret). nil allows RS256,
	// ES256 and EdDSA when a JWKS is set, and HS256 when Secret is.
	Algorithms []string

	// Issuer, when set, is the "iss" every token must carry, exactly.
	Issuer string
	// Audience, when set, lists the audiences accepted: a token's "aud"
	// must hold at least one of them.
	Audience []string

	// Leeway is the clock skew allowed when "exp", "nbf" and "iat" are
	// checked: a token is still valid Leeway after its exp and already
	// valid Leeway before its nbf. 0 means DefaultLeeway (30s); a
	// negative Leeway means none.
	Leeway time.Duration
	// RefreshInterval is how often JWKSURL is fetched again (0:
	// DefaultRefreshInterval, 10m).
	RefreshInterval time.Duration
	// FetchTimeout bounds one fetch of JWKSURL, response body included
	// (0: DefaultFetchTimeout, 5s).
	FetchTimeout time.Duration
	// MinRefetch is the least time between two fetches caused by tokens
	// naming an unknown kid (0: DefaultMinRefetch, 30s): a flood of
	// tokens with made-up kids costs one fetch per MinRefetch.
	MinRefetch time.Duration
	// CacheSize is the most verified tokens remembered (0:
	// DefaultCacheSize, 10,000; each entry holds the token's SHA-256 and
	// its decoded claims, about 1 KiB for a typical token). Negative: no
	// cache, every token is verified in full.
	CacheSize int
}

// Source is where a request carries its token. The zero value reads
// "Authorization: Bearer <token>" (RFC 6750 §2.1). Set at most one of
// Header and Cookie.
type Source struct {
	// Header names the header that carries the token. "" and
	// "Authorization" read the Authorization header, whose scheme must be
	// Bearer (another scheme, such as Basic, is no token). Any other
	// header's whole value is the token, less a "Bearer " prefix if it has
	// one.
	Header string
	// Cookie names the cookie whose value is the token.
	Cookie string
}

// Options are a Verifier's collaborators. The zero value is usable.
type Options struct {
	// HTTPClient fetches JWKSURL; nil uses a client of its own whose
	// redirects must keep to https (or loopback). Each fetch also has
	// Config.FetchTimeout as its deadline.
	HTTPClient *http.Client
	// Log, when set, is told what goes wrong in the background, with a
	// constant message ("jwks fetch failed", "jwks key skipped") and an
	// error that names the URL or file: a fetch that failed (the last
	// good key set is kept) and a key of a JWKS that was skipped. It may
	// be called from several goroutines at once. A caller with a zap
	// logger passes func(msg string, err error) { log.Warn(msg,
	// zap.Error(err)) }.
	Log func(msg string, err error)
}

// settings is a Config checked, with its defaults applied.
type settings struct {
	Config
	algs   []string
	leeway time.Duration
}

// check validates c and applies the defaults. Every problem is reported,
// joined, in the words of the Config field at fault.
func (c Config) check() (settings, error) {
	s := settings{Config: c}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	hasJWKS := c.JWKSFile != "" || c.JWKSURL != ""
	if c.JWKSFile != "" && c.JWKSURL != "" {
		bad("JWKSFile and JWKSURL: set one, not both")
	}
	if !hasJWKS && c.Secret == nil {
		bad("no keys: set JWKSFile, JWKSURL or Secret")
	}
	if c.JWKSURL != "" {
		if err := checkURL(c.JWKSURL); err != nil {
			bad("JWKSURL %q: %v", c.JWKSURL, err)
		}
	}
	if c.Source.Header != "" && c.Source.Cookie != "" {
		bad("Source: set Header or Cookie, not both")
	}

	s.algs = c.Algorithms
	if s.algs == nil {
		if hasJWKS {
			s.algs = append(s.algs, "RS256", "ES256", "EdDSA")
		}
		if c.Secret != nil {
			s.algs = append(s.algs, "HS256")
		}
	} else {
		s.algs = slices.Clone(s.algs)
	}
	if c.Algorithms != nil && len(c.Algorithms) == 0 {
		bad("Algorithms: empty: nil allows the defaults, an empty list nothing")
	}
	hmacAllowed := false
	for _, alg := range s.algs {
		switch {
		case strings.EqualFold(alg, "none"):
			bad(`Algorithms: "none" is never allowed: it is a token without a signature`)
		case isHMAC(alg):
			hmacAllowed = true
			if c.Secret == nil {
				bad("Algorithms: %s needs Secret: HMAC tokens are never verified with keys of a JWKS", alg)
			} else if want := hmacKeyBytes(alg); len(c.Secret) < want {
				bad("Secret: %d bytes, under the %d that %s needs", len(c.Secret), want, alg)
			}
		case slices.Contains(asymmetricAlgs, alg):
			if !hasJWKS {
				bad("Algorithms: %s needs JWKSFile or JWKSURL", alg)
			}
		default:
			bad("Algorithms: unknown algorithm %q", alg)
		}
	}
	if c.Secret != nil && !hmacAllowed && c.Algorithms != nil {
		bad("Secret is set but Algorithms allows no HS256, HS384 or HS512")
	}

	switch {
	case c.Leeway == 0:
		s.leeway = DefaultLeeway
	case c.Leeway > 0:
		s.leeway = c.Leeway
	}
	if c.RefreshInterval < 0 || c.FetchTimeout < 0 || c.MinRefetch < 0 {
		bad("RefreshInterval, FetchTimeout and MinRefetch must not be negative")
	}
	if s.RefreshInterval == 0 {
		s.RefreshInterval = DefaultRefreshInterval
	}
	if s.FetchTimeout == 0 {
		s.FetchTimeout = DefaultFetchTimeout
	}
	if s.MinRefetch == 0 {
		s.MinRefetch = DefaultMinRefetch
	}
	if s.CacheSize == 0 {
		s.CacheSize = DefaultCacheSize
	}
	return s, errors.Join(errs...)
}

func isHMAC(alg string) bool { return slices.Contains(hmacAlgs, alg) }

// hmacKeyBytes is the least length of an HMAC secret for alg, in bytes.
func hmacKeyBytes(alg string) int {
	switch alg {
	case "HS384":
		return 48
	case "HS512":
		return 64
	}
	return 32
}

// checkURL accepts https, and http to a loopback host.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	switch {
	case u.Host == "":
		return errors.New("no host")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return nil
	}
	return errors.New("must be https, or http to a loopback address")
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// defaultClient is the client of a Verifier not given one: a redirect
// must keep to the rules of JWKSURL.
func defaultClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConns:        2,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("more than 5 redirects")
			}
			return checkURL(req.URL.String())
		},
	}
}
