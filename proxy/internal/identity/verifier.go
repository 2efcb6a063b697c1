package identity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// maxTokenBytes bounds a token (16 KiB): a bigger one is refused before
// it is parsed.
const maxTokenBytes = 16 << 10

// Status is what a request's token came to.
type Status uint8

// The statuses. The zero value is Missing: nothing is valid unless
// verified.
const (
	Missing Status = iota // the request carries no token
	Invalid               // a token that is not to be trusted
	Valid                 // a verified token
)

func (s Status) String() string {
	switch s {
	case Missing:
		return "missing"
	case Invalid:
		return "invalid"
	case Valid:
		return "valid"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Result is the outcome of a verification.
type Result struct {
	Status Status
	// Reason says why a token is Invalid: one of the Reason constants, a
	// short fixed phrase, fit for a log field or a metric label (it never
	// holds the token or a claim). "" for Missing and Valid.
	Reason string
}

// Why a token is Invalid (Result.Reason).
const (
	ReasonSeveral     = "several tokens"        // the header or cookie is repeated
	ReasonEmpty       = "empty token"           // "Bearer" with nothing after it, an empty header or cookie
	ReasonTooLarge    = "token too large"       // over 16 KiB
	ReasonMalformed   = "malformed"             // not a JWS in compact form
	ReasonAlgorithm   = "algorithm not allowed" // "alg" outside Config.Algorithms ("none" always)
	ReasonNoKid       = "no kid"                // a public-key token without a kid
	ReasonUnknownKid  = "unknown kid"           // no key of that kid, after any refetch
	ReasonKeyMismatch = "key does not fit alg"  // the kid's key is of another family, curve or "alg"
	ReasonSignature   = "bad signature"
	ReasonClaims      = "malformed claims" // the payload is not a JSON object, or a registered claim has the wrong type
	ReasonNoExpiry    = "no exp"           // tokens must expire
	ReasonExpired     = "expired"          // past exp by more than the leeway
	ReasonNotYetValid = "not yet valid"    // before nbf or iat by more than the leeway
	ReasonIssuer      = "wrong issuer"
	ReasonAudience    = "wrong audience"
	ReasonNoTime      = "no time given" // Verify was passed the zero time.Time
)

// Verifier turns a request's bearer token into verified claims. It is
// safe for concurrent use. Close stops its background refresh.
type Verifier struct {
	s      settings
	algs   []jose.SignatureAlgorithm
	log    func(msg string, err error)
	client *http.Client
	cache  *cache // nil when Config.CacheSize < 0

	keys atomic.Pointer[keySet] // the key set in use; never nil after New

	fetchMu sync.Mutex // serializes fetching JWKSURL and installing its keys

	mu           sync.Mutex // guards the fields below
	call         *fetchCall // the fetch for an unknown kid in flight, if any
	kidFetched   bool       // a fetch for an unknown kid has been made
	lastKidFetch time.Time  // when it was made (the now of the Verify that caused it)
	closed       bool

	ctx    context.Context // done when Close is called
	cancel context.CancelFunc
	wg     sync.WaitGroup // the refresher and any fetch in flight
}

// New checks cfg and loads its keys: it reads JWKSFile, or fetches
// JWKSURL once; either failing is an error that names the file or URL and
// what is wrong with it. With JWKSURL, a goroutine refreshes the keys
// every RefreshInterval until Close.
func New(cfg Config, opts Options) (*Verifier, error) {
	s, err := cfg.check()
	if err != nil {
		return nil, err
	}
	v := &Verifier{s: s, log: opts.Log, client: opts.HTTPClient}
	for _, a := range s.algs {
		v.algs = append(v.algs, jose.SignatureAlgorithm(a))
	}
	if v.client == nil && s.JWKSURL != "" {
		v.client = defaultClient()
	}
	if s.CacheSize > 0 {
		v.cache = newCache(s.CacheSize)
	}
	v.ctx, v.cancel = context.WithCancel(context.Background())

	ks := &keySet{}
	var skipped []string
	switch {
	case s.JWKSFile != "":
		data, err := readFile(s.JWKSFile)
		if err == nil {
			ks, skipped, err = parseKeySet(data)
		}
		if err != nil {
			v.cancel()
			return nil, fmt.Errorf("jwks file %s: %w", s.JWKSFile, err)
		}
		v.logSkipped("jwks file "+s.JWKSFile, skipped)
	case s.JWKSURL != "":
		ks, skipped, err = v.fetch(v.ctx)
		if err != nil {
			v.cancel()
			return nil, fmt.Errorf("jwks url %s: %w", s.JWKSURL, err)
		}
		v.logSkipped("jwks url "+s.JWKSURL, skipped)
	}
	ks.gen = 1
	if v.cache != nil {
		v.cache.reset(ks.gen)
	}
	v.keys.Store(ks)

	if s.JWKSURL != "" {
		v.wg.Add(1)
		go v.refresher()
	}
	return v, nil
}

// readFile reads a JWKS file of at most maxJWKSBytes. Its errors do not
// repeat the path, which the caller names.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return nil, pe.Err
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f)
}

// Close stops the background refresh and waits for it and for any fetch
// in flight to end. Verify still works after Close, with the last key set
// and no more fetches. Close may be called more than once.
func (v *Verifier) Close() {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.cancel()
	v.wg.Wait()
}

// Verify reads r's token from the configured Source and verifies it at
// now (see VerifyToken). A request without a token is Missing; a
// repeated header or cookie, or an empty token, is Invalid. r's context
// bounds the wait for a fetch of JWKSURL caused by an unknown kid.
func (v *Verifier) Verify(r *http.Request, now time.Time) (Claims, Result) {
	tok, res := v.s.Source.token(r)
	if res.Status != Valid {
		return Claims{}, res
	}
	return v.VerifyToken(r.Context(), tok, now)
}

// token reads the token of r; Status Valid means one was found (not yet
// verified).
func (src Source) token(r *http.Request) (string, Result) {
	var val string
	switch {
	case src.Cookie != "":
		cs := r.CookiesNamed(src.Cookie)
		switch len(cs) {
		case 0:
			return "", Result{Status: Missing}
		case 1:
			val = cs[0].Value
		default:
			// A second cookie of the same name may have been planted from
			// a sibling domain: which one the client meant is unknown.
			return "", Result{Status: Invalid, Reason: ReasonSeveral}
		}
	default:
		name := src.Header
		if name == "" {
			name = "Authorization"
		}
		vals := r.Header.Values(name)
		switch len(vals) {
		case 0:
			return "", Result{Status: Missing}
		case 1:
			val = vals[0]
		default:
			return "", Result{Status: Invalid, Reason: ReasonSeveral}
		}
		scheme, rest, _ := strings.Cut(strings.TrimSpace(val), " ")
		isBearer := strings.EqualFold(scheme, "Bearer")
		if http.CanonicalHeaderKey(name) == "Authorization" && !isBearer {
			return "", Result{Status: Missing} // Basic, Digest…: no bearer token
		}
		if isBearer {
			val = rest
		}
	}
	val = strings.TrimSpace(val)
	if val == "" {
		return "", Result{Status: Invalid, Reason: ReasonEmpty}
	}
	return val, Result{Status: Valid}
}

// VerifyToken verifies a compact JWS token at the instant now (which must
// not be zero): its "alg" is in the allow-list, its signature verifies
// with the key its kid names (or with Secret for HMAC), it has an "exp"
// and is valid at now give or take the leeway, and its "iss" and "aud"
// are those configured. A token of a kid not in the key set causes a
// fetch of JWKSURL, shared with concurrent callers and at most one per
// MinRefetch; ctx bounds the wait for it. A token verified before and
// still valid at now is answered from the cache.
func (v *Verifier) VerifyToken(ctx context.Context, token string, now time.Time) (Claims, Result) {
	switch {
	case token == "":
		return Claims{}, Result{Status: Missing}
	case len(token) > maxTokenBytes:
		return Claims{}, invalid(ReasonTooLarge)
	case now.IsZero():
		return Claims{}, invalid(ReasonNoTime)
	}
	var h [sha256.Size]byte
	if v.cache != nil {
		h = hashToken(token)
		if c, ok := v.cache.get(h, now); ok {
			return c, Result{Status: Valid}
		}
	}
	e, gen, reason := v.verify(ctx, token, now)
	if reason != "" {
		return Claims{}, invalid(reason)
	}
	if v.cache != nil {
		v.cache.put(h, e, gen, now)
	}
	return e.claims, Result{Status: Valid}
}

// hashToken is the SHA-256 of token. A token of up to 4 KiB is copied
// to the stack, not the heap, on its way to the hash (a hit allocates
// nothing).
func hashToken(token string) [sha256.Size]byte {
	var buf [4 << 10]byte
	if len(token) <= len(buf) {
		return sha256.Sum256(append(buf[:0], token...))
	}
	return sha256.Sum256([]byte(token))
}

func invalid(reason string) Result { return Result{Status: Invalid, Reason: reason} }

// verify verifies token in full. It returns the entry to cache and the
// generation of the key set that verified it, or why it is invalid.
func (v *Verifier) verify(ctx context.Context, token string, now time.Time) (e entry, gen uint64, reason string) {
	jws, err := jose.ParseSignedCompact(token, v.algs)
	if err != nil {
		if _, ok := errors.AsType[*jose.ErrUnexpectedSignatureAlgorithm](err); ok {
			return entry{}, 0, ReasonAlgorithm
		}
		return entry{}, 0, ReasonMalformed
	}
	hdr := jws.Signatures[0].Header
	ks := v.keys.Load()
	var verifyKey any
	if isHMAC(hdr.Algorithm) {
		// Only the configured secret: never a key of the JWKS, so that a
		// public key cannot be used as an HMAC secret (the RS256 → HS256
		// confusion). v.algs holds HMAC algorithms only with a Secret.
		verifyKey = v.s.Secret
	} else {
		if hdr.KeyID == "" {
			return entry{}, 0, ReasonNoKid
		}
		k, ok := ks.keys[hdr.KeyID]
		if !ok && v.s.JWKSURL != "" {
			ks = v.refetch(ctx, now)
			k, ok = ks.keys[hdr.KeyID]
		}
		if !ok {
			return entry{}, 0, ReasonUnknownKid
		}
		if !k.fits(hdr.Algorithm) {
			return entry{}, 0, ReasonKeyMismatch
		}
		verifyKey = k.pub
	}
	payload, err := jws.Verify(verifyKey)
	if err != nil {
		return entry{}, 0, ReasonSignature
	}
	e, reason = v.check(payload, now)
	return e, ks.gen, reason
}

// check decodes a verified payload and checks its registered claims at
// now. The registered claims are read from the same decoded map the
// Claims give, so that what is checked and what is keyed on cannot
// differ (encoding/json matches struct fields regardless of case, and a
// payload with both "iss" and "ISS" would otherwise be read two ways).
func (v *Verifier) check(payload []byte, now time.Time) (entry, string) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
		return entry{}, ReasonClaims
	}
	var std jwt.Claims
	var ok bool
	if std.Expiry, ok = numericDate(m, "exp"); !ok {
		return entry{}, ReasonClaims
	}
	if std.NotBefore, ok = numericDate(m, "nbf"); !ok {
		return entry{}, ReasonClaims
	}
	if std.IssuedAt, ok = numericDate(m, "iat"); !ok {
		return entry{}, ReasonClaims
	}
	if iss, has := m["iss"]; has {
		if std.Issuer, ok = iss.(string); !ok {
			return entry{}, ReasonClaims
		}
	}
	if std.Audience, ok = audience(m["aud"]); !ok {
		return entry{}, ReasonClaims
	}
	if std.Expiry == nil {
		return entry{}, ReasonNoExpiry
	}
	err := std.ValidateWithLeeway(jwt.Expected{
		Issuer:      v.s.Issuer,
		AnyAudience: v.s.Audience,
		Time:        now,
	}, v.s.leeway)
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return entry{}, ReasonExpired
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return entry{}, ReasonNotYetValid
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return entry{}, ReasonIssuer
	case errors.Is(err, jwt.ErrInvalidAudience):
		return entry{}, ReasonAudience
	default:
		return entry{}, ReasonClaims
	}
	e := entry{claims: Claims{m: m}, until: std.Expiry.Time().Add(v.s.leeway)}
	for _, d := range []*jwt.NumericDate{std.NotBefore, std.IssuedAt} {
		if d != nil {
			if from := d.Time().Add(-v.s.leeway); from.After(e.from) {
				e.from = from
			}
		}
	}
	return e, ""
}

// numericDate reads a NumericDate claim (RFC 7519 §2), whole seconds as
// go-jose reads them; absent is nil, and ok is false for a value that is
// not a number.
func numericDate(m map[string]any, name string) (*jwt.NumericDate, bool) {
	raw, has := m[name]
	if !has {
		return nil, true
	}
	n, ok := raw.(json.Number)
	if !ok {
		return nil, false
	}
	f, err := n.Float64()
	if err != nil || f < -1e15 || f > 1e15 {
		return nil, false
	}
	d := jwt.NumericDate(int64(f))
	return &d, true
}

// audience reads "aud": a string or an array of strings (RFC 7519 §4.1.3).
func audience(raw any) (jwt.Audience, bool) {
	switch a := raw.(type) {
	case nil:
		return nil, true
	case string:
		return jwt.Audience{a}, true
	case []any:
		out := make(jwt.Audience, 0, len(a))
		for _, e := range a {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func (v *Verifier) logSkipped(where string, skipped []string) {
	if v.log == nil {
		return
	}
	for _, s := range skipped {
		v.log("jwks key skipped", fmt.Errorf("%s: %s", where, s))
	}
}
