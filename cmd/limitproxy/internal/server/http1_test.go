package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/limitproxy/limitproxy/policy/config"
)

// TestHTTP1Switch: [server] http1 picks the plain-HTTP/1.1 server of the
// proxy listener, limitproxy's front by default or net/http's alone, and
// either forwards and refuses alike: the first request 200 from the
// upstream, the next 429.
func TestHTTP1Switch(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	for _, c := range []struct {
		line      string // the [server] line; "": the default
		wantFront bool
	}{
		{"", true},
		{`http1 = "limitproxy"`, true},
		{`http1 = "net/http"`, false},
	} {
		t.Run(c.line, func(t *testing.T) {
			cfg, err := config.Parse("http1.toml", fmt.Appendf(nil, `
[server]
listen = "127.0.0.1:0"
%s
[admin]
listen = "127.0.0.1:0"
[log]
access = false
[[upstream]]
name = "app"
targets = [%q]
[[policy]]
name = "all"
upstream = "app"
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/10s"
  burst = 1
`, c.line, up.URL))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ready := make(chan listening, 1)
			done := make(chan error, 1)
			var proc *process
			go func() { done <- serve(ctx, "", cfg, io.Discard, ready, func(p *process) { proc = p }) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serve: %v", err)
				}
			}()
			var l listening
			select {
			case l = <-ready:
			case err := <-done:
				t.Fatalf("serve: %v", err)
			}
			if got := proc.front != nil; got != c.wantFront {
				t.Errorf("limitproxy's front serves: %v, want %v", got, c.wantFront)
			}
			for i, want := range []int{200, 429} {
				resp, err := http.Get("http://" + l.Proxy.String() + "/x")
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("request %d: %d, want %d", i+1, resp.StatusCode, want)
				}
			}
		})
	}
}
