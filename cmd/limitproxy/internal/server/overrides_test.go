package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/poll"
	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/proxy"
)

// TestOverrides, the whole server over loopback, memory store: a policy
// of burst 2 per address; PUT an override of scale 3 for 127.0.0.1 and it
// gets 6 (RateLimit-Policy says q=6); replace it with a limit of its own
// (1 per hour, counted apart) and it gets 1; a reload keeps it; the list
// shows it; after a restart on the same overrides file it still applies; DELETE removes it
// (204, then 404), and the policy's own limits decide again.
func TestOverrides(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "overrides.json")
	write := func(path, up string) {
		text := configText(up, 2, "1/h", "")
		text = strings.Replace(text, "[log]\n", "[store]\noverrides_file = \""+file+"\"\n[log]\n", 1)
		os.WriteFile(path, []byte(withKeySecret(t, text)), 0o644)
	}
	r := startFile(t, write)
	get := func(r *running) (int, string) {
		resp, err := http.Get(r.proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("RateLimit-Policy")
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
	burst := func(r *running) (n int, policy string) {
		for range 20 {
			code, p := get(r)
			if code != 200 {
				return n, p
			}
			n++
		}
		return n, ""
	}
	if c, b := call(r, "PUT", "/api/v1/policies/all/overrides/127.0.0.1", `{"scale": 3, "note": "partner"}`); c != 200 ||
		!strings.Contains(b, `"persisted": true`) || !strings.Contains(b, `"persistence": "file"`) {
		t.Fatalf("PUT scale: %d %s; want 200, persisted in the file", c, b)
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), proxy.StoreKey("9:127.0.0.1;")) || strings.Contains(string(b), "127.0.0.1") {
		t.Fatalf("the overrides file holds %q: want the key hashed, never the address", b)
	}
	if n, pol := burst(r); n != 6 || !strings.Contains(pol, "q=6") {
		t.Fatalf("scale 3 of burst 2: %d admitted (%q), want 6 and q=6", n, pol)
	}
	if c, b := call(r, "PUT", "/api/v1/policies/all/overrides/127.0.0.1", `{"limits": [{"algorithm": "fixed_window", "limit": 1, "window": "1h"}]}`); c != 200 {
		t.Fatalf("PUT limits: %d %s", c, b)
	}
	if n, _ := burst(r); n != 1 {
		t.Fatalf("an override of 1 per hour: %d admitted, want 1", n)
	}
	if c, b := call(r, "PUT", "/api/v1/policies/all/overrides/127.0.0.1", `{"limits": [{"algorithm": "fixed_window", "limit": 0, "window": "1h"}]}`); c != 400 {
		t.Fatalf("PUT a limit of 0: %d %s, want 400", c, b)
	}
	if c, b := call(r, "POST", "/api/v1/reload", ""); c != 200 {
		t.Fatalf("reload: %d %s", c, b)
	}
	if n, pol := burst(r); n != 0 || !strings.Contains(pol, "q=1") {
		t.Fatalf("after a reload: %d admitted (%q), want 0 and q=1 (the override still applies, its hour spent)", n, pol)
	}
	c, b := call(r, "GET", "/api/v1/overrides", "")
	var list struct{ Overrides []map[string]any }
	if json.Unmarshal([]byte(b), &list); c != 200 || len(list.Overrides) != 1 || list.Overrides[0]["key"] != testHasher.Key("9:127.0.0.1;") || list.Overrides[0]["orphaned"] != false {
		t.Fatalf("GET overrides: %d %s", c, b)
	}
	r.stop()
	r = startFile(t, write)
	if n, _ := burst(r); n != 1 {
		// A new process: the fixed window starts fresh, the override
		// comes back from the file.
		t.Fatalf("after a restart: %d admitted, want 1 (the override, reloaded from its file)", n)
	}
	if c, _ := call(r, "DELETE", "/api/v1/policies/all/overrides/127.0.0.1", ""); c != 204 {
		t.Fatalf("DELETE: %d, want 204", c)
	}
	if c, _ := call(r, "DELETE", "/api/v1/policies/all/overrides/127.0.0.1", ""); c != 404 {
		t.Fatalf("DELETE again: %d, want 404", c)
	}
	if n, pol := burst(r); n != 2 || !strings.Contains(pol, "q=2") {
		t.Fatalf("without the override: %d admitted (%q), want the policy's 2", n, pol)
	}
}

// TestOverridesShared: two instances on one Redis; an override set
// through one's admin API applies on the other within a second, and so
// does its removal.
func TestOverridesShared(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	write := func(path, up string) {
		text := configText(up, 2, "1/h", "")
		text = strings.Replace(text, "[log]\n", fmt.Sprintf("[store]\nbackend = \"redis\"\n[store.redis]\naddrs = [%q]\ntimeout = \"2s\"\n[log]\n", srv.Addr()), 1)
		os.WriteFile(path, []byte(text), 0o644)
	}
	a, b := startFile(t, write), startFile(t, write)
	quota := func(r *running) string {
		resp, err := http.Get(r.proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("RateLimit-Policy")
	}
	req, _ := http.NewRequest("PUT", a.admin+"/api/v1/policies/all/overrides/127.0.0.1", strings.NewReader(`{"scale": 5}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT on the first instance: %v %v", resp, err)
	}
	var put struct {
		Persisted   bool
		Persistence string
	}
	json.NewDecoder(resp.Body).Decode(&put)
	resp.Body.Close()
	// The test's Redis runs without persistence (--save "" --appendonly
	// no): written to Redis, but not to its disk.
	if put.Persisted || put.Persistence != "redis none" {
		t.Errorf("PUT on Redis without persistence answered persisted %v, persistence %q; want false, \"redis none\"", put.Persisted, put.Persistence)
	}
	start := time.Now()
	poll.For(t, time.Second, func() bool { return strings.Contains(quota(b), "q=10") }, "the second instance did not apply the override")
	t.Logf("the second instance applied the override after %v", time.Since(start))
	req, _ = http.NewRequest("DELETE", a.admin+"/api/v1/policies/all/overrides/127.0.0.1", nil)
	req.Header.Set("Content-Type", "application/json")
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	resp.Body.Close()
	poll.For(t, time.Second, func() bool { return strings.Contains(quota(b), "q=2") }, "the second instance did not drop the override")
}
