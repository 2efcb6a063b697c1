package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/limitproxy/limitproxy"
	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/server"
	"github.com/limitproxy/limitproxy/policy/config"
)

// demoUpstream is where config.example.toml sends requests.
const demoUpstream = "127.0.0.1:9000"

// demo starts an echo upstream on 127.0.0.1:9000 and the proxy with the
// example configuration on :8080, and prints commands to try.
func demo(ctx context.Context, stdout, stderr io.Writer) error {
	cfg, err := config.Parse("config.example.toml", limitproxy.ExampleConfig)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", demoUpstream)
	if err != nil {
		return fmt.Errorf("demo upstream: listen %s: %w", demoUpstream, err)
	}
	up := &http.Server{Handler: echo(), ReadHeaderTimeout: 5 * time.Second}
	go up.Serve(ln)
	defer up.Close()

	srv, err := server.New(cfg, server.Options{Stderr: stderr, Version: versionNumber()})
	if err != nil {
		return err
	}
	go func() {
		var addrs server.Addrs
		select {
		case addrs = <-srv.Ready():
		case <-ctx.Done():
			return
		}
		_, port, _ := net.SplitHostPort(addrs.Proxy.String())
		base := "http://127.0.0.1:" + port
		admin := ""
		if addrs.Admin != nil {
			// A call that changes something needs this Content-Type
			// (docs/admin-api.md), also without a body.
			a := "http://" + addrs.Admin.String()
			admin = fmt.Sprintf(`
  # the admin API: the login client's standing, then a reset (a call that
  # changes something needs Content-Type: application/json)
  curl %s/api/v1/policies/login/keys/127.0.0.1
  curl -i -X DELETE -H 'Content-Type: application/json' %s/api/v1/policies/login/keys/127.0.0.1
`, a, a)
		}
		fmt.Fprintf(stdout, `limitproxy demo: echo upstream on http://%s, proxy on %s (config.example.toml)

Try, in another terminal:

  # policy "default": 600 requests a minute per client; watch the RateLimit headers
  curl -i %s/hello

  # policy "login": 5 POSTs a minute (sliding_log); the 6th gets 429 with Retry-After
  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%%{http_code}\n' -X POST %s/login; done

  # policy "reports": a leaky bucket of 5/s; 10 requests at once leave 200ms apart
  for i in $(seq 10); do curl -s -o /dev/null -w '%%{http_code} after %%{time_total}s\n' %s/reports & done; wait

  # policy "api": 10/s with a burst of 20 per API key
  for i in $(seq 25); do curl -s -o /dev/null -w '%%{http_code} ' -H 'X-API-Key: k1' %s/api/items; done; echo
%s
Ctrl-C stops both.
`, demoUpstream, base, base, base, base, base, admin)
	}()
	return srv.Run(ctx)
}

// echo answers every request with what it received, as JSON.
func echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery,
			"host": r.Host, "headers": r.Header, "received": time.Now().Format(time.RFC3339Nano),
		})
	})
}
