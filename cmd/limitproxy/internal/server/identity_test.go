package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestIdentityPreflight: what `limitproxy check` and a start run reports
// a JWKS file that is missing or does not parse, and an HS256 secret
// variable unset, at its key's file:line:col.
func TestIdentityPreflight(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"keys": [{"kty": "RSA", "kid": "k"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LIMITPROXY_TEST_UNSET_SECRET", "")
	for _, c := range []struct {
		name, source, want string
	}{
		{"unparsable", `jwks_file = "` + bad + `"`, "c.toml:5:1: identity.jwks_file: jwks file " + bad + ": "},
		{"missing", `jwks_file = "` + filepath.Join(dir, "none.json") + `"`, "c.toml:5:1: identity.jwks_file: jwks file " + filepath.Join(dir, "none.json") + ": no such file"},
		{"secret unset", `secret_env = "LIMITPROXY_TEST_UNSET_SECRET"`, "c.toml:5:1: identity.secret_env: environment variable LIMITPROXY_TEST_UNSET_SECRET is unset or empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.toml")
			text := `[server]
listen = "127.0.0.1:0"

[identity]
` + c.source + `

[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "p"
upstream = "app"
key = ["jwt:sub"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
`
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Admin.Listen = ""
			err = Preflight(cfg, PreflightOptions{})
			if err == nil {
				t.Fatal("Preflight passed")
			}
			got := strings.ReplaceAll(err.Error(), path, "c.toml")
			if !strings.Contains(got, c.want) {
				t.Fatalf("Preflight:\n%s\nwant it to hold %q", got, c.want)
			}
		})
	}
}

// TestIdentityReloadNewJWKS: the whole server with an [identity]: a
// reload through the admin API reads the JWKS file again, so a token of
// a newly published kid is valid after it, while the counters of another
// policy are kept; a reload whose JWKS does not parse is refused and the
// keys in force stay.
func TestIdentityReloadNewJWKS(t *testing.T) {
	t.Parallel()
	k1, k2 := newTestKey(t, "k1"), newTestKey(t, "k2")
	var jwks string
	text := func(up string) string {
		return configText(up, 2, "1/h", "") + `
[identity]
jwks_file = "` + jwks + `"
`
	}
	r := startFile(t, func(path, up string) {
		jwks = filepath.Join(filepath.Dir(path), "jwks.json")
		writeTestJWKS(t, jwks, k1)
		os.WriteFile(path, []byte(usersPolicy(text(up))), 0o644)
	})
	get := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", r.proxy+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	reload := func() map[string]any {
		t.Helper()
		resp, err := http.Post(r.admin+"/api/v1/reload", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		return body
	}
	alice1, alice2 := k1.token(t, "alice"), k2.token(t, "alice")
	if s := get("/u/1", alice1); s != 200 {
		t.Fatalf("k1 token: %d", s)
	}
	if s := get("/u/1", alice2); s != 400 {
		t.Fatalf("k2 token before the reload: %d, want 400 (absent, on_missing = reject)", s)
	}
	for range 2 {
		get("/x", "")
	}
	if s := get("/x", ""); s != 429 {
		t.Fatalf("drained catch-all: %d", s)
	}

	os.WriteFile(jwks, []byte(`{"keys": [{"kty": "RSA", "kid": "k"}]}`), 0o600)
	if body := reload(); body["applied"] == true {
		t.Fatalf("a reload with a JWKS that does not parse was applied: %v", body)
	}
	if s := get("/u/1", alice1); s != 200 {
		t.Fatalf("k1 token after a refused reload: %d", s)
	}

	writeTestJWKS(t, jwks, k1, k2)
	if body := reload(); body["applied"] != true {
		t.Fatalf("reload with a new JWKS: %v", body)
	}
	if s := get("/u/1", alice2); s != 200 {
		t.Fatalf("k2 token after the reload: %d", s)
	}
	// alice has 3 of 4 spent; the catch-all is still drained.
	if s := get("/u/1", alice1); s != 429 {
		t.Fatalf("alice's bucket after the reload: %d, want 429 (its count kept)", s)
	}
	if s := get("/x", ""); s != 429 {
		t.Fatalf("catch-all after the reload: %d, want 429 (its count kept)", s)
	}
}

// usersPolicy puts before text's catch-all policy a policy for /u/ keyed
// by jwt:sub, burst 3, refusing a request without a valid token.
func usersPolicy(text string) string {
	return strings.Replace(text, "[[policy]]", `[[policy]]
name = "users"
upstream = "app"
match = { path_prefix = "/u/" }
key = ["jwt:sub"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 3

[[policy]]`, 1)
}

// testKey is an ES256 key of the identity tests and its kid.
type testKey struct {
	priv *ecdsa.PrivateKey
	kid  string
}

func newTestKey(t *testing.T, kid string) testKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{k, kid}
}

// token signs a token of sub valid from a minute ago for an hour (the
// server's clock is the wall clock).
func (k testKey) token(t *testing.T, sub string) string {
	t.Helper()
	now := time.Now()
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k.priv}, (&jose.SignerOptions{}).WithHeader("kid", k.kid))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"sub": sub, "iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix()})
	obj, err := sg.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeTestJWKS(t *testing.T, path string, keys ...testKey) {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.priv.PublicKey, KeyID: k.kid, Algorithm: "ES256", Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestIdentityAdminByClaim: the admin API names a user of a policy keyed
// by jwt:sub by the claim's value: its standing (GET …/keys/alice), an
// override that raises its burst, and its ban and lift; another user's
// standing is its own.
func TestIdentityAdminByClaim(t *testing.T) {
	t.Parallel()
	k := newTestKey(t, "k1")
	r := startFile(t, func(path, up string) {
		jwks := filepath.Join(filepath.Dir(path), "jwks.json")
		writeTestJWKS(t, jwks, k)
		text := usersPolicy(configText(up, 2, "1/h", `
[identity]
jwks_file = "`+jwks+`"
`))
		text = strings.Replace(text, "  burst = 3\n", "  burst = 3\n  [policy.ban]\n  duration = \"1h\"\n", 1)
		os.WriteFile(path, []byte(text), 0o644)
	})
	get := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", r.proxy+"/u/1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	admin := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, r.admin+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	alice, bob := k.token(t, "alice"), k.token(t, "bob")
	get(alice)
	get(alice)
	if code, m := admin("GET", "/api/v1/policies/users/keys/alice", ""); code != 200 || m["remaining"] != 0.0 || m["limit"] != 3.0 {
		t.Fatalf("alice's standing after 2 of 3: %d %v, want remaining 0 (after the request asked about) of 3", code, m)
	}
	if code, m := admin("GET", "/api/v1/policies/users/keys/bob", ""); code != 200 || m["remaining"] != 2.0 {
		t.Fatalf("bob's standing, untouched: %d %v", code, m)
	}
	if code, m := admin("PUT", "/api/v1/policies/users/overrides/alice", `{"limits": [{"algorithm": "token_bucket", "rate": "1/1h", "burst": 10}]}`); code != 200 {
		t.Fatalf("override alice: %d %v", code, m)
	}
	for i := range 5 {
		if s := get(alice); s != 200 {
			t.Fatalf("alice's request %d under an override of her own (burst 10, counted apart): %d", i, s)
		}
	}
	for range 3 {
		get(bob)
	}
	if s := get(bob); s != 429 {
		t.Fatalf("bob over his burst: %d, want 429 (the offence that bans)", s)
	}
	code, m := admin("GET", "/api/v1/policies/users/bans", "")
	if bans, _ := m["bans"].([]any); code != 200 || len(bans) != 1 {
		t.Fatalf("bans: %d %v, want bob's alone", code, m)
	}
	if code, _ := admin("DELETE", "/api/v1/policies/users/bans/bob", ""); code != 204 {
		t.Fatalf("lift bob's ban by his sub: %d, want 204 (counts reset too)", code)
	}
	if s := get(bob); s != 200 {
		t.Fatalf("bob after the lift: %d", s)
	}
}

// TestIdentityRotationUnderLoad: the whole server verifying against a
// JWKS URL on loopback while 8 users send requests at once and the
// issuer rotates its key: the new key is published beside the old, the
// users switch to tokens of the new kid (the first fetches the set once;
// the others wait for that fetch, none is refused), an attacker's tokens
// under the new kid claiming a user's sub are answered 401 throughout,
// then the old key is retired and a reload fetches the set again. No
// answer is a 5xx, every user's count is exactly that user's requests
// (none keyed to another user, none of the attacker's), and the JWKS was
// fetched four times: at start, for the new kid, at the reload, and once
// for the retired kid a token names after it (unknown to the reloaded
// verifier, which may fetch for it once per 30 s).
func TestIdentityRotationUnderLoad(t *testing.T) {
	t.Parallel()
	const users, each = 8, 25
	k1, k2, attacker := newTestKey(t, "k1"), newTestKey(t, "k2"), newTestKey(t, "k2")
	var (
		mu    sync.Mutex
		set   []byte
		hits  atomic.Int64
		serve = func(keys ...testKey) {
			path := filepath.Join(t.TempDir(), "jwks.json")
			writeTestJWKS(t, path, keys...)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			set = b
			mu.Unlock()
		}
	)
	serve(k1)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		mu.Lock()
		b := set
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(jwks.Close)
	r := startFile(t, func(path, up string) {
		text := strings.Replace(configText(up, 1, "1/h", `
[identity]
jwks_url = "`+jwks.URL+`"
`), `[[policy]]
name = "all"`, `[[policy]]
name = "users"
key = ["jwt:sub"]
on_missing = "unauthorized"`, 1)
		text = strings.Replace(text, `algorithm = "token_bucket"
  rate = "1/h"
  burst = 1`, `algorithm = "fixed_window"
  limit = 100000
  window = "1h"`, 1)
		os.WriteFile(path, []byte(text), 0o644)
	})
	var fivexx, refused, attackerIn atomic.Int64
	get := func(token string) int {
		req, _ := http.NewRequest("GET", r.proxy+"/x", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			fivexx.Add(1)
		}
		return resp.StatusCode
	}
	phase := func(key testKey, forged bool) {
		var wg sync.WaitGroup
		for u := range users {
			tok := key.token(t, fmt.Sprintf("user-%d", u))
			wg.Go(func() {
				for range each {
					if get(tok) != 200 {
						refused.Add(1)
					}
				}
			})
		}
		if forged {
			tok := attacker.token(t, "user-0")
			wg.Go(func() {
				for range 2 * each {
					if s := get(tok); s != 401 {
						attackerIn.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}
	phase(k1, false)
	serve(k1, k2) // published beside the old key
	phase(k2, true)
	serve(k2) // the old key retired
	resp, err := http.Post(r.admin+"/api/v1/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := get(k1.token(t, "user-0")); s != 401 {
		t.Errorf("a token of the retired key after the reload: %d, want 401", s)
	}
	if fivexx.Load() != 0 || refused.Load() != 0 || attackerIn.Load() != 0 {
		t.Fatalf("%d answers 5xx, %d users' requests refused, %d of the attacker's not 401", fivexx.Load(), refused.Load(), attackerIn.Load())
	}
	if got := hits.Load(); got != 4 {
		t.Errorf("%d JWKS fetches, want 4 (start, the new kid, the reload, the retired kid once after it)", got)
	}
	for u := range users {
		resp, err := http.Get(fmt.Sprintf("%s/api/v1/policies/users/keys/user-%d", r.admin, u))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		// The standing counts the request asked about as admitted.
		if want := float64(100000 - 2*each - 1); m["remaining"] != want {
			t.Errorf("user-%d: remaining %v, want %v (exactly its own %d requests counted)", u, m["remaining"], want, 2*each)
		}
	}
}

// TestIdentityJWKSFileWatched: the JWKS file is watched as the config file
// is: a key added to it comes into force without a reload (the log says
// trigger "jwks"), and after a reload that names another JWKS file, a key
// added to that one does too, while the first file is no longer
// followed.
func TestIdentityJWKSFileWatched(t *testing.T) {
	t.Parallel()
	k1, k2, k3 := newTestKey(t, "k1"), newTestKey(t, "k2"), newTestKey(t, "k3")
	var jwks, cfgPath, upURL string
	write := func(file string) {
		text := usersPolicy(configText(upURL, 2, "1/h", `
[identity]
jwks_file = "`+file+`"
`))
		tmp := cfgPath + ".tmp"
		os.WriteFile(tmp, []byte(text), 0o644)
		os.Rename(tmp, cfgPath)
	}
	r := startFile(t, func(path, up string) {
		cfgPath, upURL = path, up
		jwks = filepath.Join(filepath.Dir(path), "jwks.json")
		writeTestJWKS(t, jwks, k1)
		write(jwks)
	})
	get := func(token string) int {
		req, _ := http.NewRequest("GET", r.proxy+"/u/1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// waitStatus polls (bounded: the watch's debounce is 300 ms) until a
	// request with token gets want.
	waitStatus := func(token string, want int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for get(token) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: never %d; log:\n%s", what, want, r.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if s := get(k2.token(t, "bob")); s != 400 {
		t.Fatalf("k2 before it is in the file: %d", s)
	}
	replace := func(path string, keys ...testKey) {
		writeTestJWKS(t, path+".tmp", keys...)
		os.Rename(path+".tmp", path)
	}
	replace(jwks, k1, k2)
	waitStatus(k2.token(t, "bob"), 200, "k2 added to the watched file")
	lastReload := func() (trigger, at string) {
		t.Helper()
		resp, err := http.Get(r.admin + "/api/v1/config")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var cfg struct {
			LastReload struct{ Trigger, At string } `json:"last_reload"`
		}
		json.NewDecoder(resp.Body).Decode(&cfg)
		return cfg.LastReload.Trigger, cfg.LastReload.At
	}
	if trigger, _ := lastReload(); trigger != "jwks" {
		t.Errorf("last_reload.trigger %q, want jwks", trigger)
	}

	other := filepath.Join(r.dir, "keys", "other.json")
	os.MkdirAll(filepath.Dir(other), 0o755)
	writeTestJWKS(t, other, k1)
	write(other)
	waitStatus(k2.token(t, "carol"), 400, "k2 gone with the switch to other.json")
	replace(other, k1, k3)
	waitStatus(k3.token(t, "dave"), 200, "k3 added to the newly named file")
	_, before := lastReload()
	replace(jwks, k1, k2, k3)
	time.Sleep(time.Second) // more than the debounce: a watch of the old file would have reloaded by now
	if trigger, at := lastReload(); at != before {
		t.Errorf("the first file is still followed: a reload (%s) after it changed", trigger)
	}
}
