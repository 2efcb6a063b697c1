package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestEvictionFloodKeepsSpentKey: with max_keys = 1000, a client that has
// used its 10 requests sends 3000 requests under junk API keys, then tries
// its own key again: still 429. (The store evicted its entry, the one
// closest to fresh, and gave it 10 more.)
func TestEvictionFloodKeepsSpentKey(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	src := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "error"
[store]
max_keys = 1000
[[upstream]]
name = "up"
targets = [%q]
[[policy]]
name = "api"
upstream = "up"
key = ["header:X-API-Key"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 10
  window = "1h"
`, up.URL)
	addr := startServer(t, "evict.toml", src).Proxy.String()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 10 {
		if code := get("victim"); code != http.StatusOK {
			t.Fatalf("request %d of the limit: %d", i+1, code)
		}
	}
	if code := get("victim"); code != http.StatusTooManyRequests {
		t.Fatalf("11th request: %d, want 429", code)
	}
	for i := range 3000 {
		get(fmt.Sprintf("junk-%d", i))
	}
	if code := get("victim"); code != http.StatusTooManyRequests {
		t.Fatalf("after 3000 junk keys, the spent key got %d, want 429", code)
	}
}
