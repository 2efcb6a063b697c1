package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/server"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestContainerHealth runs the container's configuration (deploy/
// container.toml) as the image does, on loopback ports: it refuses to start
// without its admin token, starts with it, and `limitproxy health` (the
// image's HEALTHCHECK) answers ok while it runs and fails once it stops.
func TestContainerHealth(t *testing.T) {
	src, err := os.ReadFile("../../deploy/container.toml")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	text := strings.Replace(string(src), `listen = ":9091"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, adminPort), 1)
	text = strings.Replace(text, `listen = ":8080"`, `listen = "127.0.0.1:0"`, 1)
	path := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(path, []byte(text), 0o644)

	cfg, err := config.LoadWith(path, server.LoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LIMITPROXY_ADMIN_TOKEN", "")
	srv, _ := server.New(cfg, server.Options{Path: path, Stderr: &bytes.Buffer{}})
	if err := srv.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "LIMITPROXY_ADMIN_TOKEN") {
		t.Errorf("start without the admin token: %v, want an error naming LIMITPROXY_ADMIN_TOKEN", err)
	}

	t.Setenv("LIMITPROXY_ADMIN_TOKEN", "s3cret")
	srv, _ = server.New(cfg, server.Options{Path: path, Stderr: &bytes.Buffer{}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"health", "-config", path}, &stdout, &stderr); err != nil || stdout.String() != "ok\n" {
		t.Errorf("health while running: %v, %q", err, stdout.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := run(context.Background(), []string{"health", "-config", path}, &stdout, &stderr); err == nil {
		t.Error("health after the stop: ok, want an error")
	}
}
