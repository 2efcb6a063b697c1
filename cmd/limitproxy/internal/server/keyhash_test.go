package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/proxy"
)

// testKeySecret is the key hash secret withKeySecret configures.
const testKeySecret = "limitproxy-test-key-hash-secret"

// withKeySecret returns text with [admin] key_hash_secret_env naming a
// variable set to testKeySecret (by TestMain, once: t.Setenv would keep
// the tests that use it from running in parallel).
func withKeySecret(t *testing.T, text string) string {
	t.Helper()
	return strings.Replace(text, "[admin]\n", "[admin]\nkey_hash_secret_env = \"LIMITPROXY_TEST_KEY_SECRET\"\n", 1)
}

// testHasher is the key hash under testKeySecret.
var testHasher = proxy.NewKeyHasher([]byte(testKeySecret))

// TestKeyHashAcrossViews: one client, banned, over its limit and given an
// override, shows one hash in the top offenders, the bans list and the
// overrides list: the key hash under key_hash_secret_env, the same after
// a restart (a new process, the same secret).
func TestKeyHashAcrossViews(t *testing.T) {
	file := filepath.Join(t.TempDir(), "overrides.json")
	write := func(path, up string) {
		text := configText(up, 1, "1/h", "") + "  [policy.ban]\n  duration = \"1h\"\n"
		text = strings.Replace(text, "[log]\n", "[store]\noverrides_file = \""+file+"\"\n[log]\n", 1)
		os.WriteFile(path, []byte(withKeySecret(t, text)), 0o644)
	}
	call := func(r *running, method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, r.admin+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	r := startFile(t, write)
	for range 3 {
		resp, err := http.Get(r.proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	want := testHasher.Key("9:127.0.0.1;")
	views := func(r *running) (top, bans, overrides string) {
		_, b := call(r, "GET", "/api/v1/policies/all/top", "")
		var tl struct{ Rejected []struct{ Key string } }
		json.Unmarshal([]byte(b), &tl)
		if len(tl.Rejected) > 0 {
			top = tl.Rejected[0].Key
		}
		_, b = call(r, "GET", "/api/v1/policies/all/bans", "")
		var bl struct{ Bans []struct{ Key string } }
		json.Unmarshal([]byte(b), &bl)
		if len(bl.Bans) > 0 {
			bans = bl.Bans[0].Key
		}
		_, b = call(r, "GET", "/api/v1/overrides", "")
		var ol struct{ Overrides []struct{ Key string } }
		json.Unmarshal([]byte(b), &ol)
		if len(ol.Overrides) > 0 {
			overrides = ol.Overrides[0].Key
		}
		return
	}
	if c, b := call(r, "PUT", "/api/v1/policies/all/overrides/127.0.0.1", `{"scale": 2}`); c != 200 {
		t.Fatalf("PUT override: %d %s", c, b)
	}
	top, bans, ov := views(r)
	if top != want || bans != want || ov != want {
		t.Fatalf("top %q, bans %q, overrides %q: want %q in each", top, bans, ov, want)
	}
	// The bans list's hash lifts the ban.
	if c, b := call(r, "DELETE", "/api/v1/policies/all/bans/x?hash="+bans, ""); c != 200 || !strings.Contains(b, `"counts_reset": false`) {
		t.Fatalf("lift by the listed hash: %d %s", c, b)
	}
	if c, _ := call(r, "DELETE", "/api/v1/policies/all/bans/x?hash="+bans, ""); c != 404 {
		t.Fatalf("lift again: %d, want 404", c)
	}
	r.stop()
	r = startFile(t, write)
	if _, _, ov := views(r); ov != want {
		t.Fatalf("after a restart the override shows %q, want %q", ov, want)
	}
}
