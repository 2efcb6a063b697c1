package identity

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

func TestParseKeySet(t *testing.T) {
	ec := newSigner(t, jose.ES256, "ec")
	ed := newSigner(t, jose.EdDSA, "ed")
	ecJSON, _ := json.Marshal(ec.public())
	edJSON, _ := json.Marshal(ed.public())
	ks, skipped, err := parseKeySet([]byte(`{"keys": [` + string(ecJSON) + `, ` + string(edJSON) + `,
		{"kty": "OKP", "crv": "X25519", "kid": "x", "x": "hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo"},
		{"kty": "RSA", "use": "enc", "kid": "enc", "n": "AQAB", "e": "AQAB"},
		{"kty": "RSA", "alg": "RSA-OAEP", "kid": "oaep", "n": "AQAB", "e": "AQAB"},
		{"kty": "XYZ", "kid": "future"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ks.keys) != 2 || ks.keys["ec"].pub == nil || ks.keys["ed"].pub == nil {
		t.Errorf("keys = %v, want ec and ed", ks.keys)
	}
	want := []string{
		`key 2 (kid "x"): key type "OKP" is not supported`,
		`key 3 (kid "enc"): use "enc" is not for signatures`,
		`key 4 (kid "oaep"): alg "RSA-OAEP" is not a signature algorithm`,
		`key 5 (kid "future"): key type "XYZ" is not supported`,
	}
	if strings.Join(skipped, "\n") != strings.Join(want, "\n") {
		t.Errorf("skipped =\n%s\nwant\n%s", strings.Join(skipped, "\n"), strings.Join(want, "\n"))
	}

	// The fingerprint depends on the keys, not on their order.
	again, _, err := parseKeySet([]byte(`{"keys": [` + string(edJSON) + `, ` + string(ecJSON) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if again.sum != ks.sum {
		t.Error("same keys in another order: another fingerprint")
	}
	other, _, err := parseKeySet(jwksJSON(t, ec.public()))
	if err != nil {
		t.Fatal(err)
	}
	if other.sum == ks.sum {
		t.Error("a key less: the same fingerprint")
	}
}

// TestJWKSFileErrors: a JWKS file that cannot be used is an error of New
// that names the file and what is wrong with it.
func TestJWKSFileErrors(t *testing.T) {
	ec := newSigner(t, jose.ES256, "ec")
	ecPub, _ := json.Marshal(ec.public())
	ecPriv, _ := json.Marshal(jose.JSONWebKey{Key: ec.priv, KeyID: "ec"})
	noKid, _ := json.Marshal(jose.JSONWebKey{Key: ec.priv.Public()})
	wrongAlg, _ := json.Marshal(jose.JSONWebKey{Key: ec.priv.Public(), KeyID: "ec", Algorithm: "RS256"})
	oct, _ := json.Marshal(jose.JSONWebKey{Key: testSecret, KeyID: "hs"})
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	smallJSON, _ := json.Marshal(jose.JSONWebKey{Key: small.Public(), KeyID: "small"})
	for _, tc := range []struct {
		name, body, want string
	}{
		{"not JSON", `keys: []`, "not a JWKS: invalid character"},
		{"no keys", `{"key": []}`, `not a JWKS: no "keys" array`},
		{"keys not an array", `{"keys": {}}`, "not a JWKS: json: cannot unmarshal object"},
		{"empty", `{"keys": []}`, "no usable signature key"},
		{"key not an object", `{"keys": [7]}`, "key 0: json: cannot unmarshal number"},
		{"bad EC point", `{"keys": [{"kty": "EC", "crv": "P-256", "kid": "p", "x": "AA", "y": "AA"}]}`, `key 0 (kid "p"): `},
		{"no kty", `{"keys": [{"kid": "k"}]}`, `key 0 (kid "k"): go-jose/go-jose: missing json web key type`},
		{"symmetric", `{"keys": [` + string(oct) + `]}`, `key 0 (kid "hs"): a symmetric (oct) key: a shared secret goes in Secret, never in a JWKS`},
		{"private", `{"keys": [` + string(ecPriv) + `]}`, `key 0 (kid "ec"): a private key: a JWKS must hold only public keys`},
		{"no kid", `{"keys": [` + string(noKid) + `]}`, "key 0: no kid: tokens are matched to keys by kid"},
		{"duplicate kid", `{"keys": [` + string(ecPub) + `,` + string(ecPub) + `]}`, `key 1 (kid "ec"): duplicate kid`},
		{"alg of another family", `{"keys": [` + string(wrongAlg) + `]}`, `key 0 (kid "ec"): alg RS256 does not fit its EC P-256 key`},
		{"small RSA", `{"keys": [` + string(smallJSON) + `]}`, `key 0 (kid "small"): RSA key of 1024 bits, under 2048`},
		{"over 1 MiB", `{"keys": [], "pad": "` + strings.Repeat("x", maxJWKSBytes) + `"}`, "over 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, []byte(tc.body))
			_, err := New(Config{JWKSFile: path}, Options{})
			if err == nil {
				t.Fatal("New: no error")
			}
			if !strings.HasPrefix(err.Error(), "jwks file "+path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v\nwant %q, naming the file", err, tc.want)
			}
		})
	}

	// Every bad key is reported at once.
	path := writeFile(t, []byte(`{"keys": [`+string(noKid)+`,`+string(oct)+`]}`))
	_, err = New(Config{JWKSFile: path}, Options{})
	if err == nil || !strings.Contains(err.Error(), "key 0: no kid") || !strings.Contains(err.Error(), "key 1 (kid \"hs\")") {
		t.Errorf("New: %v, want both keys reported", err)
	}

	missing := filepath.Join(t.TempDir(), "absent.json")
	if _, err := New(Config{JWKSFile: missing}, Options{}); err == nil || !os.IsNotExist(unwrapAll(err)) || err.Error() != "jwks file "+missing+": no such file or directory" {
		t.Errorf("New with a missing file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// TestJWKSFileSkippedKeysLogged: a key of an unknown type is skipped and
// logged; the others verify.
func TestJWKSFileSkippedKeysLogged(t *testing.T) {
	ec := newSigner(t, jose.ES256, "ec")
	ecPub, _ := json.Marshal(ec.public())
	path := writeFile(t, []byte(`{"keys": [{"kty": "XYZ", "kid": "future"}, `+string(ecPub)+`]}`))
	var l logs
	v := newVerifier(t, Config{JWKSFile: path}, Options{Log: l.log})
	want := `jwks key skipped: jwks file ` + path + `: key 0 (kid "future"): key type "XYZ" is not supported`
	if got := l.all(); len(got) != 1 || got[0] != want {
		t.Errorf("logged %q, want %q", got, want)
	}
	if _, res := v.VerifyToken(t.Context(), ec.token(t, nil), t0); res.Status != Valid {
		t.Errorf("VerifyToken = %+v", res)
	}
}
