package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// revealConfig is a server with two policies of burst 1, "login" keyed by
// X-User and "api" by X-API-Key and the address, its key hash secret set,
// and extra in [admin].
func revealConfig(t *testing.T, up, admin string) string {
	text := strings.Replace(configText(up, 1, "1/h", ""), `level = "error"`, `level = "info"`, 1) // the reveals' log
	text = strings.Replace(text, `name = "all"`, `name = "api"`+"\nkey = [\"header:X-API-Key\", \"ip\"]\nmatch = { path_prefix = \"/api/\" }", 1)
	text += `[[policy]]
name = "login"
upstream = "app"
key = ["header:X-User"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 1
`
	return withKeySecret(t, strings.Replace(text, "[admin]\n", "[admin]\n"+admin, 1))
}

// reveal asks the admin listener at admin for the key of hash under
// policy with the Authorization auth ("" for none) and returns the status
// and the answer.
func reveal(t *testing.T, admin, policy, hash, auth string, host ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("GET", admin+"/api/v1/policies/"+policy+"/keys/by-hash/"+hash, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if len(host) > 0 {
		req.Host = host[0]
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v map[string]any
	json.Unmarshal(body, &v)
	return resp.StatusCode, v
}

// TestRevealTopKey: an operator with the token asks which client a top
// offender's key hash is and gets its key (parts and all); without the
// token, with a wrong one, for a hash the lists do not hold (a key never
// seen, a key of another policy), a malformed hash, an unknown policy or a
// foreign Host, nothing is revealed. Each reveal is logged by its hash,
// never the key.
func TestRevealTopKey(t *testing.T) {
	t.Parallel()
	r := startFile(t, func(path, up string) {
		os.WriteFile(path, []byte(revealConfig(t, up, "token_env = \"LIMITPROXY_TEST_TOKEN\"\n")), 0o644)
	})
	send := func(path, field, value string, n int) {
		for range n {
			req, _ := http.NewRequest("GET", r.proxy+path, nil)
			req.Header.Set(field, value)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	send("/login", "X-User", "alice", 3)
	send("/login", "X-User", "bob", 1)
	send("/api/x", "X-API-Key", "k 1", 2)

	// The keys as the limiter builds them: length-prefixed parts.
	alice, bob, api := testHasher.Key("5:alice;"), testHasher.Key("3:bob;"), testHasher.Key("3:k 1;9:127.0.0.1;")
	var top struct {
		Policies []struct {
			Policy   string
			Rejected []struct{ Key string }
			Closest  []struct{ Key string }
		}
	}
	if s := adminJSON(t, "GET", r.admin+"/api/v1/top", &top); s != 200 {
		t.Fatalf("GET /api/v1/top: %d", s)
	}
	shown := map[string]bool{}
	for _, p := range top.Policies {
		for _, e := range p.Rejected {
			shown[p.Policy+" "+e.Key] = true
		}
		for _, e := range p.Closest {
			shown[p.Policy+" "+e.Key] = true
		}
	}
	if !shown["login "+alice] || !shown["login "+bob] || !shown["api "+api] {
		t.Fatalf("the top lists show %v, want login %s and %s, api %s", shown, alice, bob, api)
	}

	for _, c := range []struct {
		policy, hash, auth string
		status             int
		key                string
		parts              []string
	}{
		{"login", alice, "Bearer s3cret", 200, "alice", []string{"alice"}},
		{"login", strings.ToUpper(bob), "bearer s3cret", 200, "bob", []string{"bob"}},
		{"api", api, "Bearer s3cret", 200, "k 1 127.0.0.1", []string{"k 1", "127.0.0.1"}},
		{"login", alice, "", 401, "", nil},
		{"login", alice, "Bearer wrong", 401, "", nil},
		{"login", testHasher.Key("7:mallory;"), "Bearer s3cret", 404, "", nil}, // never seen
		{"api", alice, "Bearer s3cret", 404, "", nil},                          // another policy's
		{"login", "not-a-hash", "Bearer s3cret", 400, "", nil},
		{"login", alice[:15], "Bearer s3cret", 400, "", nil},
		{"nope", alice, "Bearer s3cret", 404, "", nil},
	} {
		status, v := reveal(t, r.admin, c.policy, c.hash, c.auth)
		if status != c.status {
			t.Errorf("reveal %s %s (%q): %d %v, want %d", c.policy, c.hash, c.auth, status, v, c.status)
			continue
		}
		if status != 200 {
			if _, ok := v["key"]; ok {
				t.Errorf("reveal %s %s (%q): %d with a key: %v", c.policy, c.hash, c.auth, status, v)
			}
			continue
		}
		parts, _ := json.Marshal(v["parts"])
		want, _ := json.Marshal(c.parts)
		if v["key"] != c.key || string(parts) != string(want) || v["policy"] != c.policy || v["hash"] != strings.ToLower(c.hash) {
			t.Errorf("reveal %s %s: %v, want key %q parts %s", c.policy, c.hash, v, c.key, want)
		}
	}
	// A HEAD is answered no key: not logged as a reveal.
	req, _ := http.NewRequest("HEAD", r.admin+"/api/v1/policies/api/keys/by-hash/"+api, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("HEAD reveal: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if n := strings.Count(r.logs.String(), `"client key revealed"`); n != 3 {
		t.Errorf("%d reveals logged, want 3 (alice, bob, api's; not the HEAD)", n)
	}
	// The admin listener's Host check comes first, as on every path.
	if status, _ := reveal(t, r.admin, "login", alice, "Bearer s3cret", "rebind.example:9091"); status != http.StatusMisdirectedRequest {
		t.Errorf("reveal with a foreign Host: %d, want 421", status)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, `"client key revealed"`) || !strings.Contains(logs, alice) {
		t.Errorf("no reveal logged by its hash:\n%s", logs)
	}
	if strings.Contains(logs, "alice") || strings.Contains(logs, "k 1") {
		t.Errorf("a revealed key in the log:\n%s", logs)
	}
}

// TestRevealNeedsToken: without [admin] token_env anyone who reaches the
// listener may call the API, so a key is not revealed (403), unless
// top_keys = "raw" shows the keys to them already.
func TestRevealNeedsToken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		admin  string
		status int
	}{
		{"", 403},
		{"top_keys = \"raw\"\n", 200},
	} {
		r := startFile(t, func(path, up string) {
			os.WriteFile(path, []byte(revealConfig(t, up, c.admin)), 0o644)
		})
		for range 2 {
			req, _ := http.NewRequest("GET", r.proxy+"/login", nil)
			req.Header.Set("X-User", "alice")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		status, v := reveal(t, r.admin, "login", testHasher.Key("5:alice;"), "")
		if status != c.status || (status == 200) != (v["key"] == "alice") {
			t.Errorf("[admin] %q: reveal %d %v, want %d", c.admin, status, v, c.status)
		}
	}
}
