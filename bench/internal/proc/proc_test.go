package proc

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLimitproxyCommand: the configuration is written where the command
// reads it, and the command's stderr appends to the log file.
func TestLimitproxyCommand(t *testing.T) {
	dir := t.TempDir()
	conf, logPath := filepath.Join(dir, "c.toml"), filepath.Join(dir, "c.log")
	if err := os.WriteFile(logPath, []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := LimitproxyConfig("127.0.0.1:1", "127.0.0.1:2", "none") + fmt.Sprintf(TokenBucketPolicy, "10/s", 5)
	cmd, f, err := LimitproxyCommand("limitproxy", conf, text, logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, _ := os.ReadFile(conf); string(got) != text {
		t.Errorf("configuration written %q, want %q", got, text)
	}
	if want := []string{"limitproxy", "-config", conf}; !slices.Equal(cmd.Args, want) {
		t.Errorf("args %q, want %q", cmd.Args, want)
	}
	io.WriteString(cmd.Stderr, "after\n")
	if got, _ := os.ReadFile(logPath); string(got) != "before\nafter\n" {
		t.Errorf("log %q: want stderr appended to it", got)
	}
}

// TestOKUpstream: StartOKUpstream's server is up when it returns, and
// answers every request 200 "ok\n", text/plain.
func TestOKUpstream(t *testing.T) {
	srv, err := StartOKUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + srv.Addr + "/any/path")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok\n" || resp.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("%d %q %q: want 200 text/plain \"ok\\n\"", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}
