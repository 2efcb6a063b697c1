package replay

// Regression tests from the adversarial review of issue 18's change: each
// comment describes the defect the test was written to show; the test
// asserts the behaviour since fixed.

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/internal/config"
	"github.com/limitproxy/limitproxy/internal/server"
)

// review18Record runs a real limitproxy with cfgText (UPSTREAM replaced),
// lets traffic send requests to it over loopback, and returns the config's
// path and the access log's path.
func review18Record(t *testing.T, cfgText string, traffic func(addr string)) (string, string) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "recorded.toml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(cfgText, "UPSTREAM", up.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	srv, err := server.New(cfg, server.Options{Path: cfgPath, Stderr: stderr, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case a := <-srv.Ready():
		traffic("http://" + a.Proxy.String())
	case err := <-done:
		stop()
		t.Fatalf("server: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	logPath := filepath.Join(dir, "access.log")
	stderr.mu.Lock()
	err = os.WriteFile(logPath, stderr.b.Bytes(), 0o644)
	stderr.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return cfgPath, logPath
}

func review18Send(t *testing.T, addr, path string, header ...string) int {
	req, _ := http.NewRequest("GET", addr+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReview18InvalidUTF8HeaderKeys: HTTP allows obs-text (bytes >= 0x80)
// in header values, and the proxy keys on them byte for byte; the access
// log (zap's JSON) writes every invalid UTF-8 byte as U+FFFD, so two
// clients whose keys differ only there become one key in the replay. The
// live proxy admitted both (limit 1 each); the replay of its own log
// against the same configuration rejects one.
func TestReview18InvalidUTF8HeaderKeys(t *testing.T) {
	const cfg = `
[server]
listen = "127.0.0.1:0"
[admin]
listen = ""
[log]
level = "info"
access_replay = true
[[upstream]]
name = "up"
targets = ["UPSTREAM"]
[[policy]]
name = "api"
upstream = "up"
key = ["header:X-API-Key"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
`
	codes := map[string]int{}
	cfgPath, logPath := review18Record(t, cfg, func(addr string) {
		for _, k := range []string{"key-\xff", "key-\xfe"} {
			codes[k] = review18Send(t, addr, "/x", "X-API-Key", k)
		}
	})
	if codes["key-\xff"] != 200 || codes["key-\xfe"] != 200 {
		t.Fatalf("live: %v, want both admitted (two keys)", codes)
	}
	rep, err := Run(context.Background(), Options{Config: cfgPath, Logs: []string{logPath}, RawKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Logged) != 1 || rep.Logged[0].Agreed != rep.Logged[0].Compared || rep.Logged[0].Compared != 2 {
		var text bytes.Buffer
		rep.WriteText(&text)
		t.Errorf("replay of its own log: %+v, want 2 of 2 agreed\n%s", rep.Logged, text.String())
	}
}
