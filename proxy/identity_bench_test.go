package proxy

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// BenchmarkIdentity is what keying a limit by a verified claim costs a
// forwarded request through the handler (stub transport, as
// BenchmarkOverhead): ip is the same policy keyed by the client address
// with no [identity]; jwt-cached keys by jwt:sub a token the verifier has
// seen (its cache answers: a SHA-256 of the token and a look-up);
// jwt-verified a new token each request (20,000 users cycled through the
// cache of 10,000: every one an ES256 signature check; the other
// algorithms' checks are identity.BenchmarkVerify's "miss").
//
//	go test -run '^$' -bench Identity -benchmem ./proxy
func BenchmarkIdentity(b *testing.B) {
	es := newECKey(b, "es")
	jwks := filepath.Join(b.TempDir(), "jwks.json")
	writeJWKS(b, jwks, es)
	const policyText = `
[[upstream]]
name = "app"
targets = ["http://upstream.invalid"]
[[policy]]
name = "bench"
upstream = "app"
key = [%q]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1000000000/s"
  burst = 1000000000
`
	run := func(b *testing.B, src string, tokens []string) {
		cfg, err := config.Parse("bench.toml", []byte(src))
		if err != nil {
			b.Fatal(err)
		}
		set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
		if err != nil {
			b.Fatal(err)
		}
		h, err := Open(set, Options{Now: func() time.Time { return t0 }})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.Close)
		for _, p := range h.snap.Load().pools {
			for _, t := range p.targets {
				t.proxy.Transport = stubTransport{}
			}
		}
		req := httptest.NewRequest("GET", "http://proxy/api/x", nil)
		req.RemoteAddr = "203.0.113.7:40000"
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if tokens != nil {
				req.Header.Set("Authorization", "Bearer "+tokens[i%len(tokens)])
				i++
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		}
	}
	jwtSrc := `
[identity]
jwks_file = "` + jwks + `"
` + fmt.Sprintf(policyText, "jwt:sub")
	b.Run("ip", func(b *testing.B) { run(b, fmt.Sprintf(policyText, "ip"), nil) })
	b.Run("jwt-cached", func(b *testing.B) {
		run(b, jwtSrc, []string{es.token(b, map[string]any{"sub": "alice"})})
	})
	b.Run("jwt-verified", func(b *testing.B) {
		// More users than the cache holds, cycled: each token is gone
		// from the cache when it comes round again.
		tokens := make([]string, 20000)
		for i := range tokens {
			tokens[i] = es.token(b, map[string]any{"sub": fmt.Sprintf("user-%d", i)})
		}
		run(b, jwtSrc, tokens)
	})
}
