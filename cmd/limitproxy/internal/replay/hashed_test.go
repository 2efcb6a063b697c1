package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// hashedRecordConfig keys one policy by each kind of secret a client
// sends: an API key header (matched by presence too), a session cookie,
// a query parameter and a verified token's subject; a plan header is
// matched by value (logged as it is). Everything else is keyed by
// address.
const hashedRecordConfig = `
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]
[admin]
listen = ""
key_hash_secret_env = "LIMITPROXY_TEST_REPLAY_HASH"
[log]
level = "info"
access_replay = "hashed"
[identity]
jwks_file = "JWKS"
[[upstream]]
name = "up"
targets = ["UPSTREAM"]
[[policy]]
name = "gold"
upstream = "up"
key = ["header:X-API-Key"]
match = { path_prefix = "/api/", headers = { "X-Plan" = "gold" } }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 5
  window = "1h"
[[policy]]
name = "api"
upstream = "up"
key = ["header:X-API-Key"]
on_missing = "reject"
match = { path_prefix = "/api/", headers = { "X-API-Key" = "*" } }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "1h"
[[policy]]
name = "web"
upstream = "up"
key = ["cookie:sid"]
on_missing = "reject"
match = { path_prefix = "/web/" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "1h"
[[policy]]
name = "share"
upstream = "up"
key = ["query:token"]
on_missing = "reject"
match = { path = "/share" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "1h"
[[policy]]
name = "me"
upstream = "up"
key = ["jwt:sub"]
on_missing = "reject"
match = { path_prefix = "/me/" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "1h"
[[policy]]
name = "rest"
upstream = "up"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 3
  window = "1h"
`

// secretValue is a value no log line could hold by chance.
func secretValue(t *testing.T, prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// TestRecordThenReplayHashed: a real limitproxy with [log] access_replay
// = "hashed" serves clients keyed by an API key, a session cookie, a
// query parameter and a token's subject, who also send cookies and query
// parameters no policy reads, and spellings that refuse them (a cookie
// twice, a parameter twice). No secret value they sent, nor a token, is
// in the log; `limitproxy replay` of it against the configuration it ran
// with agrees with every decision.
func TestRecordThenReplayHashed(t *testing.T) {
	t.Setenv("LIMITPROXY_TEST_REPLAY_HASH", "a-secret-of-at-least-16-bytes")
	jwks, issue := testIssuer(t)
	token := func(sub string) string { return issue(map[string]any{"sub": sub}) }

	// Three clients of each kind; each sends 5 requests (3 allowed, 2
	// rejected), one after another, the clients at once.
	type client struct {
		path   string
		header [][2]string
	}
	var (
		clients []client
		secrets []string
	)
	for i := range 3 {
		key, gold := secretValue(t, "sk_live_"), secretValue(t, "sk_gold_")
		sid, csrf := secretValue(t, "sess-"), secretValue(t, "csrf-")
		tok, pw := secretValue(t, "tok-"), secretValue(t, "pw-")
		sub := secretValue(t, "user-") + "@example.com"
		jwt := token(sub)
		secrets = append(secrets, key, gold, sid, csrf, tok, pw, sub, jwt)
		clients = append(clients,
			client{"/api/x", [][2]string{{"X-API-Key", key}}},
			client{"/api/x", [][2]string{{"X-API-Key", gold}, {"X-Plan", "gold"}}},
			client{"/web/x", [][2]string{{"Cookie", "csrftoken=" + csrf + "; sid=" + sid + "; theme=dark"}}},
			client{"/share?token=" + tok + "&password=" + pw + "&page=2", nil},
			client{"/me/x", [][2]string{{"Authorization", "Bearer " + jwt}}},
			client{"/other", [][2]string{{"X-Forwarded-For", fmt.Sprintf("10.0.5.%d", i+1)}}},
		)
	}
	// Refused for an ambiguous or missing key part (400), each once.
	dup := secretValue(t, "sess-")
	secrets = append(secrets, dup)
	refusals := []client{
		{"/web/x", [][2]string{{"Cookie", "sid=" + dup + "; sid=" + dup + "x"}}},
		{"/share?token=" + dup + "&token=" + dup, nil},
		{"/api/x", [][2]string{{"X-API-Key", ""}}},
		{"/me/x", nil},
	}
	const each = 5
	send := func(addr string, c client) {
		req, _ := http.NewRequest("GET", addr+c.path, nil)
		for _, h := range c.header {
			req.Header.Set(h[0], h[1])
		}
		if req.Header.Get("X-Forwarded-For") == "" {
			req.Header.Set("X-Forwarded-For", "10.0.6.1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	cfgPath, logPath := record(t, strings.ReplaceAll(hashedRecordConfig, "JWKS", jwks), okUpstream, func(addr string) {
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() {
				for range each {
					send(addr, c)
				}
			})
		}
		wg.Wait()
		for _, c := range refusals {
			send(addr, c)
		}
	})
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(string(log), s) {
			t.Errorf("the log holds the secret %q", s)
		}
	}
	for _, want := range []string{`"h#:X-Api-Key":"`, `"h#:Cookie":"sid=`, `"target":"/share?token=`, `"c#:sub":"`, `"h:X-Plan":"gold"`} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the log has no %s: what a replay needs is missing", want)
		}
	}
	if t.Failed() {
		t.Fatalf("log:\n%.3000s", log)
	}

	rep, err := Run(context.Background(), Options{Config: cfgPath, Logs: []string{logPath}, RawKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	requests := int64(len(clients)*each + len(refusals))
	if rep.Read.Replayed != requests || rep.Read.Malformed != 0 || len(rep.Warnings) != 0 {
		t.Errorf("Read = %+v, warnings %q; want %d requests replayed, no warning", rep.Read, rep.Warnings, requests)
	}
	if len(rep.Logged) != 1 || rep.Logged[0].Compared != requests || rep.Logged[0].Agreed != requests {
		t.Errorf("Logged = %+v, want all %d decisions reproduced", rep.Logged, requests)
	}
	for _, p := range rep.Policies {
		c := p.Results[0].Counts
		// Each policy: 3 clients × (3 allowed + 2 rejected), and the
		// request without the key part (rejected, 400); gold allows 5.
		// The repeated cookie and parameter: invalid.
		want := map[string][2]int64{"gold": {15, 0}, "api": {9, 7}, "web": {9, 6}, "share": {9, 6}, "me": {9, 7}, "rest": {9, 6}}[p.Policy]
		if p.Row == RowInvalid {
			want = [2]int64{0, 0}
			if c.Invalid != 2 {
				t.Errorf("invalid: %d, want 2 (a cookie twice, a parameter twice)", c.Invalid)
			}
		}
		if c.Allowed != want[0] || c.Rejected != want[1] {
			t.Errorf("%s: %d allowed, %d rejected, want %v", p.rowName(), c.Allowed, c.Rejected, want)
		}
	}

	// A configuration that compares the hashed API key by value cannot be
	// replayed exactly on this log: the report says so.
	alt := filepath.Join(t.TempDir(), "alt.toml")
	cfg, _ := os.ReadFile(cfgPath)
	if err := os.WriteFile(alt, []byte(strings.Replace(string(cfg), `"X-API-Key" = "*"`, `"X-API-Key" = "sk_test"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err = Run(context.Background(), Options{Config: alt, Logs: []string{logPath}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "carry h#:X-Api-Key only as a hash") {
		t.Errorf("replayed under a configuration matching X-API-Key by value: warnings %q, want one naming h#:X-Api-Key", rep.Warnings)
	}
}
