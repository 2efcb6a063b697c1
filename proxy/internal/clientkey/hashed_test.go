package clientkey

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// testHash stands for the key hash: "" stays "", any other value becomes
// hex digits.
func testHash(v string) string {
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:8])
}

// TestHashedKeysDecideAlike: for random Cookie lines and queries built
// from the spellings Keyed reads otherwise (repeated names, another case,
// PHP's '.' for '_', percent-encoded names, quotes, bad escapes, ';' in a
// query pair, white space and commas inside a cookie pair), what
// HashedCookies and HashedQuery keep gives every keyed name the same
// state under both ambiguity modes, a present value's hash for its value,
// and no value that was not a key's.
func TestHashedKeysDecideAlike(t *testing.T) {
	names := []string{"sid", "session_id", "k"}
	cookiePieces := []string{"sid=abc", "sid=", `sid="q v"`, `sid="quoted"`, "SID=x", "sid", "session.id=s1", "session_id=s2",
		"session%5Fid=s3", "other=secret1", "a b=c", "x=y sid=z", "x=1,sid=2", "sid=a%20b", "sid=a+b", "k=v", "sid=bad;", " sid=sp ", "sid[x]=1", "s%69d=e"}
	queryPieces := []string{"k=1", "k=", "k", "K=2", "k=%zz", "k=a%20b", "k=a+b", "other=secret2", "k;x=1", "a=1;k=2", "k%3D=3",
		"%6b=4", "k[]=5", "k.=6", "sid=7", "session_id=8", "session.id=9", "=", "&", "k=é", "k=%C3%A9"}
	rng := rand.New(rand.NewPCG(3, 9))
	modes := []config.AmbiguousMode{config.AmbiguousReject, config.AmbiguousRewrite}
	for range 20000 {
		var lines []string
		for range rng.IntN(3) {
			var pairs []string
			for range rng.IntN(4) {
				pairs = append(pairs, cookiePieces[rng.IntN(len(cookiePieces))])
			}
			lines = append(lines, strings.Join(pairs, "; "))
		}
		var qs []string
		for range rng.IntN(5) {
			qs = append(qs, queryPieces[rng.IntN(len(queryPieces))])
		}
		query := strings.Join(qs, "&")

		live := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: query}}
		if lines != nil {
			live.Header["Cookie"] = lines
		}
		logged := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: HashedQuery(query, names, testHash)}}
		if lines != nil {
			logged.Header["Cookie"] = []string{HashedCookies(lines, names, testHash)}
		}
		for _, kind := range []config.KeyKind{config.KeyCookie, config.KeyQuery} {
			for _, name := range names {
				part := config.KeyPart{Kind: kind, Name: name}
				for _, mode := range modes {
					v, st := Keyed(live, part, mode)
					hv, hst := Keyed(logged, part, mode)
					if st != hst || st == Present && hv != testHash(v) {
						t.Fatalf("%v %s (%s): live %q %v, logged %q %v\n\tcookie %q → %q\n\tquery %q → %q",
							kind, name, mode, v, st, hv, hst, lines, logged.Header["Cookie"], query, logged.URL.RawQuery)
					}
				}
			}
		}
		for _, secret := range []string{"secret1", "secret2", "abc", "s1", "s2"} {
			if strings.Contains(logged.URL.RawQuery, secret) || strings.Contains(strings.Join(logged.Header["Cookie"], ""), secret) {
				t.Fatalf("%q is logged: cookie %q → %q, query %q → %q", secret, lines, logged.Header["Cookie"], query, logged.URL.RawQuery)
			}
		}
	}
}
