package main

import (
	"bytes"
	"context"
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
