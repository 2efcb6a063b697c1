package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"sync"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

// signer is a private key and the kid and algorithm its tokens name.
type signer struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

func (s signer) public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: s.priv.Public(), KeyID: s.kid, Algorithm: string(s.alg), Use: "sig"}
}

// RSA keys are slow to make under the race detector: the tests share two.
var (
	rsaOnce sync.Once
	rsaKeys [2]*rsa.PrivateKey
)

func rsaKey(t testing.TB, i int) *rsa.PrivateKey {
	rsaOnce.Do(func() {
		for i := range rsaKeys {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			rsaKeys[i] = k
		}
	})
	return rsaKeys[i]
}

func newSigner(t testing.TB, alg jose.SignatureAlgorithm, kid string) signer {
	t.Helper()
	s := signer{kid: kid, alg: alg}
	var err error
	switch alg {
	case jose.RS256:
		s.priv = rsaKey(t, 0)
	case jose.ES256:
		s.priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.ES384:
		s.priv, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case jose.EdDSA:
		_, s.priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("newSigner: %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func jwksJSON(t testing.TB, keys ...jose.JSONWebKey) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
