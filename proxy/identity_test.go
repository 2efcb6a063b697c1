package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// jwtKey is a signing key of the identity tests and the kid its public
// half has in the JWKS.
type jwtKey struct {
	alg  jose.SignatureAlgorithm
	priv any
	kid  string
}

func newRSAKey(t testing.TB, kid string) jwtKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return jwtKey{jose.RS256, k, kid}
}

func newECKey(t testing.TB, kid string) jwtKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return jwtKey{jose.ES256, k, kid}
}

// token signs claims with k: sub, plan and any of extra, issued at t0
// and expiring an hour later unless extra says otherwise.
func (k jwtKey) token(t testing.TB, extra map[string]any) string {
	t.Helper()
	c := map[string]any{"iat": t0.Unix(), "exp": t0.Add(time.Hour).Unix()}
	for n, v := range extra {
		c[n] = v
	}
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(c)
	obj, err := sg.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writeJWKS writes the public halves of keys as a JWK Set to path.
func writeJWKS(t testing.TB, path string, keys ...jwtKey) {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		var pub any
		switch p := k.priv.(type) {
		case *rsa.PrivateKey:
			pub = &p.PublicKey
		case *ecdsa.PrivateKey:
			pub = &p.PublicKey
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: pub, KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// jwtConfig is a configuration of one per-user policy keyed by jwt:sub
// (on_missing = "reject") with a burst of 3, over the JWKS at jwks.
func jwtConfig(jwks, upstream string) string {
	return `
[identity]
jwks_file = "` + jwks + `"

[[upstream]]
name = "app"
targets = ["` + upstream + `"]

[[policy]]
name = "per-user"
upstream = "app"
key = ["jwt:sub"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 3
`
}

// jwtEnv is a proxy over loopback with an [identity], its handler at
// hand for swaps.
type jwtEnv struct {
	*env
	h     *Handler
	store *memstore.Store
}

func startJWT(t *testing.T, src string) *jwtEnv {
	t.Helper()
	return startJWTWith(t, src, Options{})
}

// startJWTWith is startJWT with the handler's options o (its clock is the
// env's).
func startJWTWith(t *testing.T, src string, o Options) *jwtEnv {
	t.Helper()
	up := newUpstream(t, nil)
	src = strings.ReplaceAll(src, "UPSTREAM", up.URL)
	cfg, err := config.Parse("jwt.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	set, err := policy.Compile(cfg, store, t0)
	if err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	o.Now = clock.now
	h, err := Open(set, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &jwtEnv{env: &env{proxy: srv, up: up, clock: clock, cfg: cfg}, h: h, store: store}
}

func (e *jwtEnv) as(t *testing.T, token string) int {
	t.Helper()
	if token == "" {
		return e.get(t, "/").StatusCode
	}
	return e.get(t, "/", "Authorization", "Bearer "+token).StatusCode
}

// spend sends n requests with token and returns their statuses.
func (e *jwtEnv) spend(t *testing.T, token string, n int) []int {
	t.Helper()
	var got []int
	for range n {
		got = append(got, e.as(t, token))
	}
	return got
}

func wantStatuses(t *testing.T, what string, got []int, want ...int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// TestJWTKeysSeparateUsers: two users' tokens (RS256 and ES256) count in
// buckets of their own under one policy, and a refreshed token of the
// same sub shares its bucket.
func TestJWTKeysSeparateUsers(t *testing.T) {
	dir := t.TempDir()
	rsaKey, ecKey := newRSAKey(t, "rsa-1"), newECKey(t, "ec-1")
	jwks := filepath.Join(dir, "jwks.json")
	writeJWKS(t, jwks, rsaKey, ecKey)
	e := startJWT(t, jwtConfig(jwks, "UPSTREAM"))

	alice := rsaKey.token(t, map[string]any{"sub": "alice"})
	bob := ecKey.token(t, map[string]any{"sub": "bob"})
	wantStatuses(t, "alice", e.spend(t, alice, 2), 200, 200)
	wantStatuses(t, "bob", e.spend(t, bob, 3), 200, 200, 200)
	wantStatuses(t, "bob over", e.spend(t, bob, 1), 429)
	// A new token of alice's, issued later, signed with the other key.
	e.clock.advance(2 * time.Minute) // under the hour a token of the bucket takes
	alice2 := ecKey.token(t, map[string]any{"sub": "alice", "iat": t0.Add(time.Minute).Unix()})
	wantStatuses(t, "alice refreshed", e.spend(t, alice2, 2), 200, 429)
	wantStatuses(t, "no token", e.spend(t, "", 1), 400)
}

// TestJWTForgedTokensAreAbsent: a token that is not to be trusted keys
// nothing: with on_missing = "reject" it is answered 400, and it is never
// counted under the sub it names (the victim keeps its whole quota).
func TestJWTForgedTokensAreAbsent(t *testing.T) {
	dir := t.TempDir()
	key, other := newRSAKey(t, "rsa-1"), newRSAKey(t, "rsa-1")
	jwks := filepath.Join(dir, "jwks.json")
	writeJWKS(t, jwks, key)
	e := startJWT(t, jwtConfig(jwks, "UPSTREAM"))

	victim := map[string]any{"sub": "victim"}
	good := key.token(t, victim)
	parts := strings.Split(good, ".")
	b64 := base64.RawURLEncoding.EncodeToString
	tampered := parts[0] + "." + b64([]byte(`{"sub":"victim","plan":"pro","iat":`+jsonInt(t0.Unix())+`,"exp":`+jsonInt(t0.Add(time.Hour).Unix())+`}`)) + "." + parts[2]
	none := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	for name, tok := range map[string]string{
		"alg none":    none,
		"wrong key":   other.token(t, victim),
		"expired":     key.token(t, map[string]any{"sub": "victim", "exp": t0.Add(-time.Hour).Unix(), "iat": t0.Add(-2 * time.Hour).Unix()}),
		"tampered":    tampered,
		"unknown kid": jwtKey{key.alg, key.priv, "rsa-2"}.token(t, victim),
		"garbage":     "not.a.token",
	} {
		wantStatuses(t, name, e.spend(t, tok, 5), 400, 400, 400, 400, 400)
	}
	wantStatuses(t, "victim", e.spend(t, good, 4), 200, 200, 200, 429)
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestJWTSwapNewJWKS: a Swap reads the JWKS file again, so a new kid is
// valid after it, and keeps the counters of the policies; a Swap whose
// JWKS does not parse is refused and the set in force stays.
func TestJWTSwapNewJWKS(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := newRSAKey(t, "k1"), newECKey(t, "k2")
	jwks := filepath.Join(dir, "jwks.json")
	writeJWKS(t, jwks, k1)
	e := startJWT(t, jwtConfig(jwks, "UPSTREAM"))

	alice1 := k1.token(t, map[string]any{"sub": "alice"})
	alice2 := k2.token(t, map[string]any{"sub": "alice"})
	wantStatuses(t, "alice k1", e.spend(t, alice1, 1), 200)
	wantStatuses(t, "alice k2 before", e.spend(t, alice2, 1), 400)

	compile := func() *policy.Set {
		t.Helper()
		cfg, err := config.Parse("jwt.toml", []byte(jwtConfig(jwks, e.up.URL)))
		if err != nil {
			t.Fatal(err)
		}
		set, err := policy.Compile(cfg, e.store, t0)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	if err := os.WriteFile(jwks, []byte(`{"keys": [{"kty": "RSA"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.h.Swap(compile()); err == nil || !strings.Contains(err.Error(), "jwks file") {
		t.Fatalf("Swap with a bad JWKS file: %v, want its error", err)
	}
	wantStatuses(t, "alice k1 after a refused swap", e.spend(t, alice1, 1), 200)

	writeJWKS(t, jwks, k1, k2)
	if err := e.h.Swap(compile()); err != nil {
		t.Fatal(err)
	}
	// alice has spent 2 of 3: the counters survived both swaps.
	wantStatuses(t, "alice k2 after", e.spend(t, alice2, 2), 200, 429)
}

// TestJWTWithoutIdentityNoVerifier: a set without [identity] builds no
// verifier, so arrive does no identity work.
func TestJWTWithoutIdentityNoVerifier(t *testing.T) {
	cfg, err := config.Load("../testdata/policy/valid/minimal.toml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	if h := New(set, Options{}); h.snap.Load().verifier != nil {
		t.Fatal("a set without [identity] has a verifier")
	}
}

// TestJWTClaimsMatch: a claims condition selects the tier's policy by the
// verified token's plan; a token whose plan is forged (tampered, or
// signed with another key) has no claims and falls to the anonymous
// policy, keyed by address.
func TestJWTClaimsMatch(t *testing.T) {
	dir := t.TempDir()
	key, other := newECKey(t, "ec-1"), newECKey(t, "ec-1")
	jwks := filepath.Join(dir, "jwks.json")
	writeJWKS(t, jwks, key)
	e := startJWT(t, `
[identity]
jwks_file = "`+jwks+`"

[[upstream]]
name = "app"
targets = ["UPSTREAM"]

[[policy]]
name = "free"
upstream = "app"
match = { claims = { plan = "free" } }
key = ["jwt:sub"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 1

[[policy]]
name = "pro"
upstream = "app"
match = { path_prefix = "/", claims = { plan = "pro", "org.tier" = "gold" } }
key = ["jwt:sub"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 4

[[policy]]
name = "anonymous"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 2
`)
	free := key.token(t, map[string]any{"sub": "f", "plan": "free"})
	pro := key.token(t, map[string]any{"sub": "p", "plan": "pro", "org": map[string]any{"tier": "gold"}})
	forged := other.token(t, map[string]any{"sub": "x", "plan": "pro", "org": map[string]any{"tier": "gold"}})
	parts := strings.Split(free, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"f","plan":"pro","org":{"tier":"gold"},"iat":`+jsonInt(t0.Unix())+`,"exp":`+jsonInt(t0.Add(time.Hour).Unix())+`}`)) + "." + parts[2]

	wantStatuses(t, "free", e.spend(t, free, 2), 200, 429)
	wantStatuses(t, "pro", e.spend(t, pro, 5), 200, 200, 200, 200, 429)
	// The forgeries share the anonymous policy's one address bucket.
	wantStatuses(t, "forged pro", e.spend(t, forged, 1), 200)
	wantStatuses(t, "tampered free", e.spend(t, tampered, 2), 200, 429)
	wantStatuses(t, "no token", e.spend(t, "", 1), 429)
}

// TestJWTUnauthorized: with on_missing = "unauthorized" a request without
// a token is answered 401 with a bare Bearer challenge, and one whose
// token fails verification 401 with RFC 6750's invalid_token and the
// reason; neither is counted, and a request lacking another part of a
// mixed key (a header) still gets the 400 of a missing key part.
func TestJWTUnauthorized(t *testing.T) {
	dir := t.TempDir()
	key := newRSAKey(t, "rsa-1")
	jwks := filepath.Join(dir, "jwks.json")
	writeJWKS(t, jwks, key)
	src := strings.Replace(jwtConfig(jwks, "UPSTREAM"), `on_missing = "reject"`, `on_missing = "unauthorized"`, 1)
	src = strings.Replace(src, `key = ["jwt:sub"]`, `key = ["header:X-Tenant", "jwt:sub"]`, 1)
	core, logs := observer.New(zapcore.InfoLevel)
	e := startJWTWith(t, src, Options{Logger: zap.New(core), AccessLog: true})

	good := key.token(t, map[string]any{"sub": "alice"})
	expired := key.token(t, map[string]any{"sub": "alice", "exp": t0.Add(-time.Hour).Unix(), "iat": t0.Add(-2 * time.Hour).Unix()})
	cases := []struct {
		name, tenant, token string
		status              int
		challenge, logged   string
	}{
		{"no token", "t1", "", 401, `Bearer`, "no token"},
		{"expired", "t1", expired, 401, `Bearer error="invalid_token", error_description="expired"`, "invalid token: expired"},
		{"garbage", "t1", "not.a.token", 401, `Bearer error="invalid_token", error_description="malformed"`, "invalid token: malformed"},
		{"no tenant, no token", "", "", 401, `Bearer`, "no token"},
		{"no tenant", "", good, 400, "", ""},
	}
	for i, c := range cases {
		hdr := []string{}
		if c.tenant != "" {
			hdr = append(hdr, "X-Tenant", c.tenant)
		}
		if c.token != "" {
			hdr = append(hdr, "Authorization", "Bearer "+c.token)
		}
		resp := e.get(t, "/", hdr...)
		if resp.StatusCode != c.status || resp.Header.Get("WWW-Authenticate") != c.challenge {
			t.Errorf("%s: %d %q, want %d %q", c.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), c.status, c.challenge)
		}
		l := waitLines(t, logs, i+1)[i]
		if got, _ := l["error"].(string); got != c.logged || l["decision"] != "rejected" || l["status"] != int64(c.status) {
			t.Errorf("%s: access line error %q decision %v status %v, want %q rejected %d", c.name, got, l["decision"], l["status"], c.logged, c.status)
		}
	}
	var got []int
	for range 4 {
		got = append(got, e.get(t, "/", "X-Tenant", "t1", "Authorization", "Bearer "+good).StatusCode)
	}
	wantStatuses(t, "alice, none counted before", got, 200, 200, 200, 429)
}

// TestUnauthorizedNeedsJWTPart: on_missing = "unauthorized" on a key
// without a jwt: part is refused at its position, for a policy and for a
// limit's own key.
func TestUnauthorizedNeedsJWTPart(t *testing.T) {
	for _, src := range []string{`
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "p"
upstream = "app"
key = ["header:X-Key"]
on_missing = "unauthorized"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
  burst = 1
`, `
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "p"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/s"
  burst = 1
  key = ["ip"]
  on_missing = "unauthorized"
`} {
		_, err := config.Parse("u.toml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), `on_missing: "unauthorized" answers 401 for a request without a valid token: the key needs a jwt: part`) {
			t.Errorf("err = %v", err)
		}
	}
}
