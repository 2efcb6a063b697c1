package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckRefusesFIFO: `check` of a FIFO (or of a file that is not
// regular) answers with a clear error at once instead of blocking.
func TestCheckRefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "c.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"check", "-config", fifo}, &stdout, &stderr)
	if code := exitCode(err, &stderr); code != 1 || !strings.Contains(stderr.String(), "is not a regular file (a FIFO)") {
		t.Errorf("check of a FIFO: exit %d, %q", code, stderr.String())
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("check of a FIFO took %v", took)
	}
}

// TestCheckDeepNesting: a small deeply nested file is refused within a
// second, with its position, and without the memory the decoder would take.
func TestCheckDeepNesting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(path, []byte("a = "+strings.Repeat("[", 32<<10)), 0o644)
	begin := time.Now()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"check", "-config", path}, &stdout, &stderr)
	if code := exitCode(err, &stderr); code != 1 || !strings.Contains(stderr.String(), "c.toml:1:21: nesting deeper than 16 levels") {
		t.Errorf("check: exit %d, %q", code, stderr.String())
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("check took %v", took)
	}
}

// TestReloadFIFO: a FIFO saved at the config path of a running instance is
// refused by every reload, at once; the policies in force keep serving,
// later reloads still work, and the instance stops promptly.
func TestReloadFIFO(t *testing.T) {
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(config(up, 10, "1/h", "")), 0o644) })
	os.Remove(r.path)
	if err := syscall.Mkfifo(r.path, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		begin := time.Now()
		resp, err := http.Post(r.admin+"/api/v1/reload", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Errors []struct{ Error string } }
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 422 || len(body.Errors) == 0 || !strings.Contains(body.Errors[0].Error, "is not a regular file (a FIFO)") {
			t.Errorf("reload of a FIFO: %d %+v", resp.StatusCode, body)
		}
		if took := time.Since(begin); took > time.Second {
			t.Errorf("reload of a FIFO took %v", took)
		}
	}
	if q := r.quota(t); q != "10" {
		t.Errorf("the policies in force changed: quota %s", q)
	}
	os.Remove(r.path)
	writeAtomic(t, r.path, config(r.upstream.URL, 12, "1/h", ""))
	r.waitQuota(t, "12")
	begin := time.Now()
	r.stop()
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("stopping took %v", took)
	}
}
