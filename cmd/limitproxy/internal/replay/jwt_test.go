package replay

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// jwtRecordConfig keys a free plan per user (jwt:sub) and a pro plan per
// organisation (jwt:org.id, a nested claim), matched by the plan claim;
// a request without a valid token falls to a per-address policy.
const jwtRecordConfig = `
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]
[admin]
listen = ""
[log]
level = "info"
access_replay = true
[identity]
jwks_file = "JWKS"
[[upstream]]
name = "up"
targets = ["UPSTREAM"]
[[policy]]
name = "free"
upstream = "up"
key = ["jwt:sub"]
match = { claims = { plan = "free" } }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "1h"
[[policy]]
name = "pro"
upstream = "up"
key = ["jwt:org.id"]
match = { claims = { plan = "pro" } }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 5
  window = "1h"
[[policy]]
name = "anonymous"
upstream = "up"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "1h"
`

// TestRecordThenReplayJWT: a real limitproxy keys and matches requests by
// their tokens' verified claims; with [log] access_replay its log carries
// the claims its policies read (never the token), and `limitproxy replay`
// of the log, which has no token to verify, agrees with every decision:
// each user, each organisation, and the requests without a valid token.
func TestRecordThenReplayJWT(t *testing.T) {
	jwks, token := testIssuer(t)
	var tokens []string
	for i := range 3 {
		tokens = append(tokens, token(map[string]any{"sub": fmt.Sprintf("user-%d", i), "plan": "free"}))
	}
	for i := range 4 { // two organisations, two users each
		tokens = append(tokens, token(map[string]any{"sub": fmt.Sprintf("pro-%d", i), "plan": "pro", "org": map[string]any{"id": i % 2}}))
	}
	tokens = append(tokens, "", "not.a.token")
	const each = 6
	cfgPath, logPath := record(t, strings.ReplaceAll(jwtRecordConfig, "JWKS", jwks), okUpstream, func(addr string) {
		var wg sync.WaitGroup
		for i, tok := range tokens {
			wg.Go(func() {
				for range each {
					req, _ := http.NewRequest("GET", addr+"/api", nil)
					req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.0.0.%d", i+1))
					if tok != "" {
						req.Header.Set("Authorization", "Bearer "+tok)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	})
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), tokens[0]) || !strings.Contains(string(log), `"c:sub":"\"user-0\""`) || !strings.Contains(string(log), `"c:org.id":"1"`) {
		t.Fatalf("the log should carry the claims read (c:sub, c:org.id) and never a token:\n%.2000s", log)
	}
	rep, err := Run(context.Background(), Options{Config: cfgPath, Logs: []string{logPath}, RawKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	requests := int64(len(tokens) * each)
	if rep.Read.Replayed != requests || rep.Read.Malformed != 0 {
		t.Errorf("Read = %+v, want %d requests replayed", rep.Read, requests)
	}
	if len(rep.Logged) != 1 || rep.Logged[0].Compared != requests || rep.Logged[0].Agreed != requests {
		t.Errorf("Logged = %+v, want all %d decisions reproduced", rep.Logged, requests)
	}
	for _, p := range rep.Policies {
		c := p.Results[0].Counts
		// free: 3 users × (3 allowed + 3 rejected); pro: 2 orgs × (5 + 7);
		// anonymous: two addresses × (2 + 4).
		want := map[string][2]int{"free": {9, 9}, "pro": {10, 14}, "anonymous": {4, 8}}[p.Policy]
		if int(c.Allowed) != want[0] || int(c.Rejected) != want[1] {
			t.Errorf("policy %s: %d allowed, %d rejected, want %v", p.Policy, c.Allowed, c.Rejected, want)
		}
	}
}

// testIssuer makes an ES256 key, writes its JWKS (key id "k1") to a file
// of t's, and returns the file and a signer of tokens with the claims
// given, issued a minute ago and expiring in an hour.
func testIssuer(t *testing.T) (jwks string, token func(claims map[string]any) string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks = filepath.Join(t.TempDir(), "jwks.json")
	b, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &priv.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	if err := os.WriteFile(jwks, b, 0o600); err != nil {
		t.Fatal(err)
	}
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: priv}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	return jwks, func(claims map[string]any) string {
		now := time.Now()
		claims["iat"], claims["exp"] = now.Add(-time.Minute).Unix(), now.Add(time.Hour).Unix()
		b, _ := json.Marshal(claims)
		obj, err := sg.Sign(b)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := obj.CompactSerialize()
		return s
	}
}
