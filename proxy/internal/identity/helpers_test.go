package identity

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// The instants of the tests: tokens are issued at t0 and expire an hour
// later. No test reads the clock.
var (
	t0  = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	exp = t0.Add(time.Hour)
)

// testSecret is a 32-byte HS256 secret.
var testSecret = []byte("0123456789abcdef0123456789abcdef")

// claims are a token's claims: sub "alice" of org 42, issued by
// https://idp.example for api://limitproxy at t0, expiring at exp.
func claims(over map[string]any) map[string]any {
	c := map[string]any{
		"sub": "alice",
		"iss": "https://idp.example",
		"aud": "api://limitproxy",
		"iat": t0.Unix(),
		"exp": exp.Unix(),
		"org": map[string]any{"id": 42, "admin": true},
	}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// sign makes a compact JWS of payload with key under alg, its header
// naming kid (none when "").
func sign(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, payload map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := sg.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// token signs claims(over) with s.
func (s signer) token(t testing.TB, over map[string]any) string {
	t.Helper()
	return sign(t, s.alg, s.priv, s.kid, claims(over))
}

// writeJWKS writes the public keys of signers to a file in a temporary
// directory and returns its path.
func writeJWKS(t testing.TB, signers ...signer) string {
	t.Helper()
	var keys []jose.JSONWebKey
	for _, s := range signers {
		keys = append(keys, s.public())
	}
	return writeFile(t, jwksJSON(t, keys...))
}

func writeFile(t testing.TB, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jwksServer serves a JWKS over loopback HTTP and counts the requests.
// Its body and status can be changed while it serves.
type jwksServer struct {
	*httptest.Server
	hits   atomic.Int64
	body   atomic.Pointer[[]byte]
	status atomic.Int64 // 0: 200
	hang   atomic.Bool  // answer nothing until the client gives up
	stop   chan struct{}
}

func newJWKSServer(t testing.TB, signers ...signer) *jwksServer {
	t.Helper()
	s := &jwksServer{stop: make(chan struct{})}
	s.serve(t, signers...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if s.hang.Load() {
			select {
			case <-r.Context().Done():
			case <-s.stop:
			}
			return
		}
		if st := s.status.Load(); st != 0 {
			http.Error(w, "down", int(st))
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(*s.body.Load())
	}))
	t.Cleanup(func() {
		close(s.stop)
		s.Close()
	})
	return s
}

// serve makes the server answer with the public keys of signers.
func (s *jwksServer) serve(t testing.TB, signers ...signer) {
	t.Helper()
	var keys []jose.JSONWebKey
	for _, sg := range signers {
		keys = append(keys, sg.public())
	}
	s.serveBody(jwksJSON(t, keys...))
}

func (s *jwksServer) serveBody(b []byte) { s.body.Store(&b) }

// newVerifier makes a Verifier of cfg, closed when the test ends.
func newVerifier(t testing.TB, cfg Config, opts Options) *Verifier {
	t.Helper()
	v, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// logs collects what a Verifier logs.
type logs struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logs) log(msg string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg+": "+err.Error())
}

func (l *logs) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}
