package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/limitproxy/limitproxy"
	"github.com/limitproxy/limitproxy/cmd/limitproxy/internal/server"
	"github.com/limitproxy/limitproxy/policy/config"
)

// demoUpstream is where config.example.toml sends requests.
const demoUpstream = "127.0.0.1:9000"

// demoAddrs are where the demo listens: its echo upstream, and the proxy
// and admin listeners ("" keeps config.example.toml's).
type demoAddrs struct{ upstream, proxy, admin string }

// demo starts an echo upstream on 127.0.0.1:9000 and the proxy with the
// example configuration on :8080, and prints commands to try: those of
// README.md's "A first session", which shows what they answer.
func demo(ctx context.Context, stdout, stderr io.Writer) error {
	return runDemo(ctx, stdout, stderr, demoAddrs{upstream: demoUpstream})
}

// runDemo is demo listening on a.
func runDemo(ctx context.Context, stdout, stderr io.Writer, a demoAddrs) error {
	cfg, err := config.Parse("config.example.toml", limitproxy.ExampleConfig)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.upstream)
	if err != nil {
		return fmt.Errorf("demo upstream: listen %s: %w", a.upstream, err)
	}
	up := &http.Server{Handler: echo(), ReadHeaderTimeout: 5 * time.Second}
	go up.Serve(ln)
	defer up.Close()
	upstream := ln.Addr().String()
	if upstream != demoUpstream {
		for i := range cfg.Upstreams {
			cfg.Upstreams[i].Targets = []*url.URL{{Scheme: "http", Host: upstream}}
		}
	}
	if a.proxy != "" {
		cfg.Server.Listen = a.proxy
	}
	if a.admin != "" {
		cfg.Admin.Listen = a.admin
	}

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
		fmt.Fprint(stdout, demoCommands(upstream, "http://127.0.0.1:"+port, addrs.Admin))
	}()
	return srv.Run(ctx)
}

// demoCommands is what the demo prints: where it listens, and the
// commands of README.md's "A first session" against base (the proxy) and
// admin (the admin listener, nil if it is off).
func demoCommands(upstream, base string, admin net.Addr) string {
	var b strings.Builder
	where := ""
	if admin != nil {
		where = ", admin API on http://" + admin.String()
	}
	fmt.Fprintf(&b, `limitproxy demo: echo upstream on http://%s, proxy on %s%s (config.example.toml)

Try, in another terminal (README.md "A first session" shows what they answer):

  # policy "default": 600 requests a minute per client, and the shared limit "site";
  # RateLimit-Policy lists both, RateLimit names the closer to running out
  curl -i %s/hello

  # policy "login": 5 POSTs a minute; the 6th is an offence, and the address is
  # banned for a minute (then 2, 4... for repeat offences): every answer says so
  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%%{http_code} ' -X POST %s/login; done; echo
  curl -i -X POST %s/login
`, upstream, base, where, base, base, base)
	if admin != nil {
		a := "http://" + admin.String()
		fmt.Fprintf(&b, `
  # the admin API lifts the ban, and the address starts afresh; /login
  # answers again
  curl -s -o /dev/null -w '%%{http_code}\n' -X DELETE %s/api/v1/policies/login/bans/127.0.0.1
  curl -s -o /dev/null -w '%%{http_code}\n' -X POST %s/login
`, a, base)
	}
	fmt.Fprintf(&b, `
  # policy "reports": a leaky bucket of 5/s; 8 requests at once leave 200 ms apart
  for i in $(seq 8); do curl -s -o /dev/null -w '%%{http_code} after %%{time_total}s\n' %s/reports & done; wait

  # policy "api": 10/s with a burst of 20 per API key (25 requests on one connection)
  curl -s -o /dev/null -w '%%{http_code} ' -H 'X-API-Key: k1' '%s/api/items?n=[1-25]'; echo

Ctrl-C stops both.
`, base, base)
	return b.String()
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
