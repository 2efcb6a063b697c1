package identity

import (
	"context"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

// BenchmarkVerify is the cost of one VerifyToken of a typical token
// (seven claims, about 600 bytes for RS256): miss verifies in full (the
// cache off), hit answers from the cache.
func BenchmarkVerify(b *testing.B) {
	rs := newSigner(b, jose.RS256, "rs")
	es := newSigner(b, jose.ES256, "es")
	ed := newSigner(b, jose.EdDSA, "ed")
	path := writeJWKS(b, rs, es, ed)
	for _, alg := range []struct {
		name string
		tok  string
	}{
		{"RS256", rs.token(b, nil)},
		{"ES256", es.token(b, nil)},
		{"EdDSA", ed.token(b, nil)},
		{"HS256", sign(b, jose.HS256, testSecret, "", claims(nil))},
	} {
		b.Run(alg.name, func(b *testing.B) {
			for _, mode := range []struct {
				name      string
				cacheSize int
			}{{"miss", -1}, {"hit", 0}} {
				b.Run(mode.name, func(b *testing.B) {
					v := newVerifier(b, Config{JWKSFile: path, Secret: testSecret,
						Algorithms: []string{"RS256", "ES256", "EdDSA", "HS256"}, CacheSize: mode.cacheSize}, Options{})
					ctx := context.Background()
					if _, res := v.VerifyToken(ctx, alg.tok, t0); res.Status != Valid {
						b.Fatalf("VerifyToken = %+v", res)
					}
					b.ReportAllocs()
					b.SetBytes(int64(len(alg.tok)))
					for b.Loop() {
						v.VerifyToken(ctx, alg.tok, t0)
					}
				})
			}
		})
	}
}
