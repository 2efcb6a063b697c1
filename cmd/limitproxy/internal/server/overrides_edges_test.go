package server

// The per-key overrides across a reload and the overrides file's default
// place. Each test is named for the behaviour that must hold; its comment
// describes the defect it was written to show, since fixed.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestReloadedOverrideNeverFailsOpen: on Redis, PUT checks a scaled
// override against the policy in force (redisstore.Check), but a reload
// that changes the policy's rate is not checked against the overrides
// kept: the scaled limits then exceed the Redis store's exact arithmetic,
// every Allow of that client fails, and the handler forwards it ("limiter
// failed; request forwarded") even with on_error = "deny".
func TestReloadedOverrideNeverFailsOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rate := "1/1s"
	write := func(path, up string) {
		text := configText(up, 1000, rate, "")
		text = strings.Replace(text, "[log]\n", fmt.Sprintf("[store]\nbackend = \"redis\"\n[store.redis]\naddrs = [%q]\ntimeout = \"2s\"\non_error = \"deny\"\n[log]\n", srv.Addr()), 1)
		os.WriteFile(path, []byte(text), 0o644)
	}
	r := startFile(t, write)
	call := func(method, url, body string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if c, b := call("PUT", r.admin+"/api/v1/policies/all/overrides/127.0.0.1", `{"scale": 1000000}`); c != 200 {
		t.Fatalf("PUT scale: %d %s", c, b)
	}
	if c, _ := call("GET", r.proxy+"/x", ""); c != 200 {
		t.Fatalf("before the reload: %d", c)
	}
	// A valid policy on its own (1/17ms, burst 1000 passes the Redis check).
	rate = "1/17ms"
	write(r.path, r.upstream.URL)
	if c, b := call("POST", r.admin+"/api/v1/reload", ""); c != 200 {
		t.Fatalf("reload: %d %s", c, b)
	}
	c, h := 0, ""
	{
		resp, err := http.Get(r.proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c, h = resp.StatusCode, resp.Header.Get("RateLimit-Policy")
	}
	r.logs.mu.Lock()
	logs := r.logs.w.String()
	r.logs.mu.Unlock()
	if strings.Contains(logs, "limiter failed; request forwarded") {
		t.Errorf("after the reload the override's limits fail on Redis and the request was forwarded (status %d, RateLimit-Policy %q) despite on_error = \"deny\":\n%s", c, h, logs)
	}
}

// TestMemoryStoreStartsWithoutWritableCwd: with the memory store
// and no [store] overrides_file, the default "overrides.json" is relative
// to the working directory, and the start fails when that directory
// cannot take a file (here /proc, which even root cannot write): a
// configuration that started before this change no longer does, though
// it uses no overrides.
func TestMemoryStoreStartsWithoutWritableCwd(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/limitproxy.toml"
	os.WriteFile(path, []byte(configText("http://127.0.0.1:9", 2, "1/s", "")), 0o644)
	t.Chdir("/proc")
	cfg, err := loadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newStores(cfg.Store, nil, nil); err != nil {
		t.Errorf("a configuration without overrides cannot start outside a writable directory: %v", err)
	}
}

func loadConfigFile(path string) (*config.Config, error) { return config.Load(path) }
