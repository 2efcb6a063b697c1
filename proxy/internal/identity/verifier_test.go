package identity

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// fileSetup is a Verifier over a JWKS file of four keys (RS256 "rsa-a"
// and "rsa-b", ES256 "ec", EdDSA "ed") and testSecret for HS256.
type fileSetup struct {
	v                  *Verifier
	rsaA, rsaB, ec, ed signer
}

func newFileSetup(t *testing.T, cfg Config) *fileSetup {
	t.Helper()
	f := &fileSetup{
		rsaA: newSigner(t, jose.RS256, "rsa-a"),
		ec:   newSigner(t, jose.ES256, "ec"),
		ed:   newSigner(t, jose.EdDSA, "ed"),
	}
	f.rsaB = signer{kid: "rsa-b", alg: jose.RS256, priv: rsaKey(t, 1)}
	cfg.JWKSFile = writeJWKS(t, f.rsaA, f.rsaB, f.ec, f.ed)
	if cfg.Issuer == "" {
		cfg.Issuer = "https://idp.example"
	}
	if cfg.Audience == nil {
		cfg.Audience = []string{"api://other", "api://limitproxy"}
	}
	f.v = newVerifier(t, cfg, Options{})
	return f
}

// hsToken signs claims(over) with HS256 and secret.
func hsToken(t *testing.T, secret []byte, kid string, over map[string]any) string {
	t.Helper()
	return sign(t, jose.HS256, secret, kid, claims(over))
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func b64JSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b64(b)
}

func TestValidTokenEachAlgorithm(t *testing.T) {
	f := newFileSetup(t, Config{Secret: testSecret, Algorithms: []string{"RS256", "ES256", "EdDSA", "HS256"}})
	for _, tc := range []struct {
		name string
		tok  string
	}{
		{"RS256", f.rsaA.token(t, nil)},
		{"RS256 second key", signer{kid: "rsa-b", alg: jose.RS256, priv: rsaKey(t, 1)}.token(t, nil)},
		{"ES256", f.ec.token(t, nil)},
		{"EdDSA", f.ed.token(t, nil)},
		{"HS256", hsToken(t, testSecret, "", nil)},
		{"HS256 with a kid", hsToken(t, testSecret, "rsa-a", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, res := f.v.VerifyToken(context.Background(), tc.tok, t0)
			if res != (Result{Status: Valid}) {
				t.Fatalf("VerifyToken = %+v, want valid", res)
			}
			if sub, _ := c.Get("sub"); sub != "alice" {
				t.Errorf("sub = %q, want alice", sub)
			}
			if id, _ := c.Get("org.id"); id != "42" {
				t.Errorf("org.id = %q, want 42", id)
			}
		})
	}
}

// TestForgedTokensNeverValid sends every forgery the package guards
// against, to a Verifier that allows HS256 with a secret (the riskier
// configuration) and to one that does not.
func TestForgedTokensNeverValid(t *testing.T) {
	for _, withHS := range []bool{true, false} {
		cfg := Config{}
		if withHS {
			cfg.Secret = testSecret
			cfg.Algorithms = []string{"RS256", "ES256", "EdDSA", "HS256"}
		}
		f := newFileSetup(t, cfg)
		good := f.rsaA.token(t, nil)
		parts := strings.Split(good, ".")

		pubDER, err := x509.MarshalPKIXPublicKey(f.rsaA.priv.Public())
		if err != nil {
			t.Fatal(err)
		}
		pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
		pubJWK, err := json.Marshal(f.rsaA.public())
		if err != nil {
			t.Fatal(err)
		}
		hsReason := ReasonAlgorithm
		if withHS {
			hsReason = ReasonSignature
		}
		attacker := newSigner(t, jose.ES256, "ec")
		embedded, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: attacker.priv},
			(&jose.SignerOptions{EmbedJWK: true}).WithHeader("kid", "ec"))
		if err != nil {
			t.Fatal(err)
		}
		obj, err := embedded.Sign([]byte(`{"sub":"mallory","iss":"https://idp.example","aud":"api://limitproxy","exp":` + jsonInt(exp.Unix()) + `}`))
		if err != nil {
			t.Fatal(err)
		}
		withJWK, _ := obj.CompactSerialize()
		rsaObj, err := mustSigner(t, jose.RS256, f.rsaA.priv, "rsa-a").Sign([]byte(`{"sub":"alice","exp":` + jsonInt(exp.Unix()) + `}`))
		if err != nil {
			t.Fatal(err)
		}
		jsonSerialized := rsaObj.FullSerialize()

		for _, tc := range []struct {
			name   string
			tok    string
			now    time.Time
			reason string
		}{
			{"alg none", b64JSON(t, map[string]string{"alg": "none", "typ": "JWT", "kid": "rsa-a"}) + "." + b64JSON(t, claims(nil)) + ".", t0, ReasonAlgorithm},
			{"alg None with a signature", b64JSON(t, map[string]string{"alg": "None", "kid": "rsa-a"}) + "." + parts[1] + "." + parts[2], t0, ReasonAlgorithm},
			{"HS256 keyed with the RSA public key PEM", hsToken(t, pubPEM, "rsa-a", nil), t0, hsReason},
			{"HS256 keyed with the RSA public key DER", hsToken(t, pubDER, "rsa-a", nil), t0, hsReason},
			{"HS256 keyed with the RSA JWK", hsToken(t, pubJWK, "rsa-a", nil), t0, hsReason},
			{"HS256 with another secret", hsToken(t, []byte("another secret of thirty-two b!!"), "", nil), t0, hsReason},
			{"ES384 outside the allow-list", newSigner(t, jose.ES384, "ec").token(t, nil), t0, ReasonAlgorithm},
			{"unknown kid", sign(t, jose.RS256, f.rsaA.priv, "nope", claims(nil)), t0, ReasonUnknownKid},
			{"no kid", sign(t, jose.RS256, f.rsaA.priv, "", claims(nil)), t0, ReasonNoKid},
			{"kid of another key", sign(t, jose.RS256, f.rsaA.priv, "rsa-b", claims(nil)), t0, ReasonSignature},
			{"attacker's EC key under the EC kid", attacker.token(t, nil), t0, ReasonSignature},
			{"attacker's key embedded as jwk", withJWK, t0, ReasonSignature},
			{"RS256 header, EC key", sign(t, jose.RS256, f.rsaA.priv, "ec", claims(nil)), t0, ReasonKeyMismatch},
			{"ES256 header, RSA key", sign(t, jose.ES256, f.ec.priv, "rsa-a", claims(nil)), t0, ReasonKeyMismatch},
			{"EdDSA header, EC key", sign(t, jose.EdDSA, f.ed.priv, "ec", claims(nil)), t0, ReasonKeyMismatch},
			{"tampered payload", parts[0] + "." + b64JSON(t, claims(map[string]any{"sub": "mallory"})) + "." + parts[2], t0, ReasonSignature},
			{"tampered header", b64JSON(t, map[string]string{"alg": "RS256", "kid": "rsa-a"}) + "." + parts[1] + "." + parts[2], t0, ReasonSignature},
			{"signature cut", parts[0] + "." + parts[1] + ".", t0, ReasonSignature},
			{"expired beyond the leeway", good, exp.Add(DefaultLeeway + time.Second), ReasonExpired},
			{"not yet valid beyond the leeway", f.rsaA.token(t, map[string]any{"nbf": t0.Add(10 * time.Minute).Unix()}), t0.Add(10*time.Minute - DefaultLeeway - time.Second), ReasonNotYetValid},
			{"issued in the future", f.rsaA.token(t, map[string]any{"iat": t0.Add(time.Hour).Unix()}), t0, ReasonNotYetValid},
			{"wrong aud", f.rsaA.token(t, map[string]any{"aud": "api://else"}), t0, ReasonAudience},
			{"no aud", f.rsaA.token(t, map[string]any{"aud": nil}), t0, ReasonAudience},
			{"wrong iss", f.rsaA.token(t, map[string]any{"iss": "https://evil.example"}), t0, ReasonIssuer},
			{"no iss", f.rsaA.token(t, map[string]any{"iss": nil}), t0, ReasonIssuer},
			{"no exp", f.rsaA.token(t, map[string]any{"exp": nil}), t0, ReasonNoExpiry},
			{"exp a string", f.rsaA.token(t, map[string]any{"exp": "2099-01-01"}), t0, ReasonClaims},
			{"aud a number", f.rsaA.token(t, map[string]any{"aud": 7}), t0, ReasonClaims},
			{"JSON serialization", jsonSerialized, t0, ReasonMalformed},
			{"not a JWS", "hello", t0, ReasonMalformed},
			{"too large", strings.Repeat("a", maxTokenBytes+1), t0, ReasonTooLarge},
			{"zero time", good, time.Time{}, ReasonNoTime},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, res := f.v.VerifyToken(context.Background(), tc.tok, tc.now)
				if want := invalid(tc.reason); res != want {
					t.Errorf("withHS=%v: VerifyToken = %+v, want %+v", withHS, res, want)
				}
			})
		}
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func mustSigner(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string) jose.Signer {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNonObjectPayload: a signed payload that is not one JSON object.
func TestNonObjectPayload(t *testing.T) {
	f := newFileSetup(t, Config{})
	for _, payload := range []string{`null`, `[1,2]`, `"x"`, `{"exp":1} {"exp":2}`, `{`} {
		obj, err := mustSigner(t, jose.ES256, f.ec.priv, "ec").Sign([]byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := obj.CompactSerialize()
		if _, res := f.v.VerifyToken(context.Background(), tok, t0); res != invalid(ReasonClaims) {
			t.Errorf("payload %s: %+v, want %s", payload, res, ReasonClaims)
		}
	}
}

// TestLeewayEdges: valid up to exactly exp+leeway and from exactly
// nbf−leeway; a custom leeway and none.
func TestLeewayEdges(t *testing.T) {
	nbf := t0.Add(10 * time.Minute)
	for _, tc := range []struct {
		leeway, eff time.Duration
	}{{0, DefaultLeeway}, {5 * time.Second, 5 * time.Second}, {-1, 0}} {
		f := newFileSetup(t, Config{Leeway: tc.leeway, CacheSize: -1})
		tok := f.ec.token(t, map[string]any{"nbf": nbf.Unix()})
		for _, step := range []struct {
			now  time.Time
			want Result
		}{
			{nbf.Add(-tc.eff - time.Nanosecond), invalid(ReasonNotYetValid)},
			{nbf.Add(-tc.eff), Result{Status: Valid}},
			{exp.Add(tc.eff), Result{Status: Valid}},
			{exp.Add(tc.eff + time.Second), invalid(ReasonExpired)},
		} {
			if _, res := f.v.VerifyToken(context.Background(), tok, step.now); res != step.want {
				t.Errorf("leeway %v: VerifyToken at %v = %+v, want %+v", tc.leeway, step.now, res, step.want)
			}
		}
	}
}

func TestSource(t *testing.T) {
	f := newFileSetup(t, Config{})
	tok := f.ec.token(t, nil)
	valid := Result{Status: Valid}
	missing := Result{Status: Missing}
	for _, tc := range []struct {
		name string
		src  Source
		set  func(r *http.Request)
		want Result
	}{
		{"bearer", Source{}, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }, valid},
		{"bearer any case, spaces", Source{}, func(r *http.Request) { r.Header.Set("Authorization", " bearer   "+tok+" ") }, valid},
		{"Authorization named", Source{Header: "authorization"}, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }, valid},
		{"no header", Source{}, func(r *http.Request) {}, missing},
		{"basic", Source{}, func(r *http.Request) { r.SetBasicAuth("u", "p") }, missing},
		{"bare token in Authorization", Source{}, func(r *http.Request) { r.Header.Set("Authorization", tok) }, missing},
		{"empty bearer", Source{}, func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") }, invalid(ReasonEmpty)},
		{"two Authorization headers", Source{}, func(r *http.Request) {
			r.Header.Add("Authorization", "Bearer "+tok)
			r.Header.Add("Authorization", "Bearer x")
		}, invalid(ReasonSeveral)},
		{"bad token", Source{}, func(r *http.Request) { r.Header.Set("Authorization", "Bearer x.y.z") }, invalid(ReasonMalformed)},
		{"other header, bare", Source{Header: "X-Access-Token"}, func(r *http.Request) { r.Header.Set("X-Access-Token", tok) }, valid},
		{"other header, bearer", Source{Header: "X-Access-Token"}, func(r *http.Request) { r.Header.Set("X-Access-Token", "Bearer "+tok) }, valid},
		{"other header missing", Source{Header: "X-Access-Token"}, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }, missing},
		{"other header empty", Source{Header: "X-Access-Token"}, func(r *http.Request) { r.Header.Set("X-Access-Token", "") }, invalid(ReasonEmpty)},
		{"cookie", Source{Cookie: "session"}, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "session", Value: tok}) }, valid},
		{"cookie missing", Source{Cookie: "session"}, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }, missing},
		{"cookie twice", Source{Cookie: "session"}, func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "session", Value: tok})
			r.AddCookie(&http.Cookie{Name: "session", Value: tok})
		}, invalid(ReasonSeveral)},
		{"cookie empty", Source{Cookie: "session"}, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "session", Value: ""}) }, invalid(ReasonEmpty)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := f.v.s.Config
			cfg.Source = tc.src
			v := newVerifier(t, cfg, Options{})
			r := httptest.NewRequest("GET", "/", nil)
			tc.set(r)
			c, res := v.Verify(r, t0)
			if res != tc.want {
				t.Fatalf("Verify = %+v, want %+v", res, tc.want)
			}
			if sub, ok := c.Get("sub"); ok != (res.Status == Valid) || (ok && sub != "alice") {
				t.Errorf("sub = %q, %v", sub, ok)
			}
		})
	}
}

func TestStatusString(t *testing.T) {
	for s, want := range map[Status]string{Missing: "missing", Invalid: "invalid", Valid: "valid", 7: "Status(7)"} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", s, got, want)
		}
	}
}
