package identity

import (
	"encoding/json"
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
