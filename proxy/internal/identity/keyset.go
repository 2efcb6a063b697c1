package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	jose "github.com/go-jose/go-jose/v4"
)

// minRSABits is the smallest RSA modulus accepted, in bits (RFC 7518
// §3.3 requires 2048 for RS256).
const minRSABits = 2048

// key is one verification key of a key set: a public key, never a secret.
type key struct {
	kid string
	// alg is the key's "alg" member, "" when the JWKS gives none; when set,
	// a token must name this algorithm to be verified with the key.
	alg string
	pub crypto.PublicKey // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// keySet is one parsed JWKS. It is never changed once built, so readers
// share it through an atomic pointer.
type keySet struct {
	keys map[string]key
	// sum fingerprints the keys (kid, alg and RFC 7638 thumbprint of each):
	// two sets with the same sum verify the same tokens.
	sum [sha256.Size]byte
	// gen numbers the sets a Verifier has installed; cache entries carry
	// the generation they were verified under.
	gen uint64
}

// parseKeySet reads a JWKS (RFC 7517 §5). Keys of a type go-jose does not
// know (RFC 7517 §5 says to ignore them) and keys for encryption ("use":
// "enc", or an encryption "alg") are skipped and listed in skipped. Every
// other problem is an error, all of them joined: a key that does not
// parse, a symmetric or private key (a JWKS publishes public keys; a
// shared secret goes in Config.Secret), a key without a kid (tokens are
// matched to keys by kid alone), a duplicate kid, an "alg" that does not
// fit the key, an RSA key under 2048 bits, and a set with no usable key.
func parseKeySet(data []byte) (ks *keySet, skipped []string, err error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, nil, fmt.Errorf("not a JWKS: %w", err)
	}
	if raw.Keys == nil {
		return nil, nil, errors.New(`not a JWKS: no "keys" array`)
	}
	ks = &keySet{keys: make(map[string]key, len(raw.Keys))}
	var errs []error
	for i, r := range raw.Keys {
		var meta struct {
			Kid string `json:"kid"`
			Kty string `json:"kty"`
			Use string `json:"use"`
			Alg string `json:"alg"`
		}
		if err := json.Unmarshal(r, &meta); err != nil {
			errs = append(errs, fmt.Errorf("key %d: %w", i, err))
			continue
		}
		name := fmt.Sprintf("key %d (kid %q)", i, meta.Kid)
		if meta.Use != "" && meta.Use != "sig" {
			skipped = append(skipped, fmt.Sprintf("%s: use %q is not for signatures", name, meta.Use))
			continue
		}
		if meta.Alg != "" && !isSignatureAlg(meta.Alg) {
			skipped = append(skipped, fmt.Sprintf("%s: alg %q is not a signature algorithm", name, meta.Alg))
			continue
		}
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(r); err != nil {
			if errors.Is(err, jose.ErrUnsupportedKeyType) && meta.Kty != "" {
				skipped = append(skipped, fmt.Sprintf("%s: key type %q is not supported", name, meta.Kty))
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		if _, ok := jwk.Key.([]byte); ok {
			errs = append(errs, fmt.Errorf("%s: a symmetric (oct) key: a shared secret goes in Secret, never in a JWKS", name))
			continue
		}
		if !jwk.IsPublic() {
			errs = append(errs, fmt.Errorf("%s: a private key: a JWKS must hold only public keys", name))
			continue
		}
		if meta.Kid == "" {
			errs = append(errs, fmt.Errorf("key %d: no kid: tokens are matched to keys by kid", i))
			continue
		}
		if _, dup := ks.keys[meta.Kid]; dup {
			errs = append(errs, fmt.Errorf("%s: duplicate kid", name))
			continue
		}
		k := key{kid: meta.Kid, alg: meta.Alg, pub: jwk.Key}
		if rk, ok := k.pub.(*rsa.PublicKey); ok && rk.N.BitLen() < minRSABits {
			errs = append(errs, fmt.Errorf("%s: RSA key of %d bits, under %d", name, rk.N.BitLen(), minRSABits))
			continue
		}
		if k.alg != "" && !k.fits(k.alg) {
			errs = append(errs, fmt.Errorf("%s: alg %s does not fit its %s key", name, k.alg, keyKind(k.pub)))
			continue
		}
		ks.keys[k.kid] = k
	}
	if err := errors.Join(errs...); err != nil {
		return nil, skipped, err
	}
	if len(ks.keys) == 0 {
		return nil, skipped, errors.New("no usable signature key")
	}
	ks.sum, err = fingerprint(ks.keys)
	if err != nil {
		return nil, skipped, err
	}
	return ks, skipped, nil
}

// fingerprint hashes the keys in kid order: kid, alg and the key's
// RFC 7638 thumbprint each.
func fingerprint(keys map[string]key) ([sha256.Size]byte, error) {
	h := sha256.New()
	for _, kid := range slices.Sorted(maps.Keys(keys)) {
		k := keys[kid]
		tp, err := (&jose.JSONWebKey{Key: k.pub}).Thumbprint(crypto.SHA256)
		if err != nil {
			return [sha256.Size]byte{}, fmt.Errorf("kid %q: %w", kid, err)
		}
		fmt.Fprintf(h, "%d:%s%d:%s%d:", len(kid), kid, len(k.alg), k.alg, len(tp))
		h.Write(tp)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

// fits reports whether a token signed with alg may be verified with k:
// the key's own "alg", when it has one, is alg, and the key is of alg's
// family and curve (RSA for RS* and PS*, P-256 for ES256, P-384 for
// ES384, P-521 for ES512, Ed25519 for EdDSA). A token whose header names
// RS256 is never checked against an EC key, nor the other way round.
func (k key) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch jose.SignatureAlgorithm(alg) {
	case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512:
		_, ok := k.pub.(*rsa.PublicKey)
		return ok
	case jose.ES256:
		return isCurve(k.pub, elliptic.P256())
	case jose.ES384:
		return isCurve(k.pub, elliptic.P384())
	case jose.ES512:
		return isCurve(k.pub, elliptic.P521())
	case jose.EdDSA:
		_, ok := k.pub.(ed25519.PublicKey)
		return ok
	}
	return false
}

func isCurve(pub crypto.PublicKey, c elliptic.Curve) bool {
	ek, ok := pub.(*ecdsa.PublicKey)
	return ok && ek.Curve == c
}

// keyKind names a public key's type for messages.
func keyKind(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		return "EC " + k.Curve.Params().Name
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return fmt.Sprintf("%T", pub)
}

// asymmetricAlgs are the public-key signature algorithms a Config may
// allow; hmacAlgs need Config.Secret.
var (
	asymmetricAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
	hmacAlgs       = []string{"HS256", "HS384", "HS512"}
)

func isSignatureAlg(alg string) bool {
	return slices.Contains(asymmetricAlgs, alg) || slices.Contains(hmacAlgs, alg)
}
