package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/policy/config"
)

func TestBearer(t *testing.T) {
	for auth, want := range map[string]string{
		"Bearer s3cret":  "s3cret",
		"bearer s3cret":  "s3cret",
		"BEARER  s3cret": "s3cret",
		"Basic s3cret":   "",
		"Bearer":         "",
		"Bearer ":        "",
		"Bearers3cret":   "",
		"":               "",
	} {
		if got, ok := bearer(auth); got != want || ok != (want != "") {
			t.Errorf("bearer(%q) = %q, %v; want %q", auth, got, ok, want)
		}
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9091": true, "127.1.2.3:9091": true, "[::1]:9091": true, "localhost:9091": true,
		":9091": false, "0.0.0.0:9091": false, "[::]:9091": false, "10.0.0.1:9091": false, "example.com:9091": false, "bad": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestAdminWarnings: an admin API that listens beyond loopback without a
// token is warned about at start; with a token, lower-case "bearer" works.
func TestAdminWarnings(t *testing.T) {
	for _, c := range []struct {
		listen, tokenEnv string
		warn             bool
	}{
		{":0", "", true},
		{"127.0.0.1:0", "", false},
		{":0", "LIMITPROXY_TEST_TOKEN", false},
	} {
		t.Setenv("LIMITPROXY_TEST_TOKEN", "s3cret")
		src := "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"" + c.listen + "\"\ntoken_env = \"" + c.tokenEnv + "\"\n" +
			"[[upstream]]\nname = \"up\"\ntargets = [\"http://127.0.0.1:1\"]\n[[policy]]\nname = \"all\"\nupstream = \"up\"\n" +
			"  [[policy.limits]]\n  algorithm = \"token_bucket\"\n  rate = \"1/s\"\n"
		cfg, err := config.Parse("admin.toml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var logs bytes.Buffer
		ready := make(chan listening, 1)
		done := make(chan error, 1)
		go func() { done <- serve(ctx, "", cfg, &syncWriter{w: &logs}, ready) }()
		l := <-ready
		if c.tokenEnv != "" {
			_, port, _ := net.SplitHostPort(l.Admin.String())
			for _, auth := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret"} {
				req, _ := http.NewRequest("GET", "http://127.0.0.1:"+port+"/api/v1/config", nil)
				req.Header.Set("Authorization", auth)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("Authorization: %s: %d, want 200", auth, resp.StatusCode)
				}
			}
		}
		cancel()
		<-done
		warned := strings.Contains(logs.String(), "admin API listens beyond loopback without a token")
		if warned != c.warn {
			t.Errorf("listen %q, token_env %q: warned %v, want %v; logs:\n%s", c.listen, c.tokenEnv, warned, c.warn, logs.String())
		}
	}
}

// TestRedisLogsThroughZap: go-redis's own log lines reach limitproxy's log.
func TestRedisLogsThroughZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	routeRedisLogs(zap.New(core))
	// What go-redis's pool writes when a connection breaks.
	redisLogger.Printf(context.Background(), "redis: connection pool: %s", "failed to dial")
	if e := logs.All(); len(e) != 1 || e[0].Level != zapcore.WarnLevel || !strings.Contains(e[0].Message, "connection pool: failed to dial") {
		t.Errorf("logged %v", e)
	}
}
