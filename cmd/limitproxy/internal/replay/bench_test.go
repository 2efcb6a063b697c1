package replay

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// benchConfig has a few policies of the kinds a site runs: logins by a
// sliding log per address, an API by token bucket per key with a daily
// window per address, a leaky-bucket queue for reports, a shadow policy,
// and a default per address.
const benchConfig = `
[admin]
listen = ""
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:9000"]
[[policy]]
name = "login"
upstream = "app"
match = { methods = ["POST"], path = "/login" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 5
  window = "1m"
[[policy]]
name = "api"
upstream = "app"
match = { path_prefix = "/api/" }
key = ["ip"]
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/s"
  burst = 20
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 10000
  window = "24h"
[[policy]]
name = "reports"
upstream = "app"
match = { path_prefix = "/reports" }
key = []
  [[policy.limits]]
  algorithm = "leaky_bucket"
  rate = "50/s"
  queue = 100
[[policy]]
name = "search"
upstream = "app"
mode = "shadow"
match = { path = "/search" }
  [[policy.limits]]
  algorithm = "sliding_window"
  limit = 30
  window = "1m"
[[policy]]
name = "default"
upstream = "app"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 600
  window = "1m"
`

var (
	benchPaths = []string{"/", "/login", "/api/v1/items", "/api/v1/items/8812", "/static/app.3f9a1c.js", "/static/img/logo.png",
		"/search", "/reports/2026/11", "/api/v1/orders", "/healthz", "/wp-login.php", "/api/v1/users/me/preferences"}
	benchQueries = []string{"", "", "", "?page=2", "?q=rate+limit&sort=-date", "?id=8812&expand=owner,tags"}
	benchUAs     = []string{
		"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
		"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
		"curl/8.5.0", "python-requests/2.32.3", "Go-http-client/1.1",
	}
)

// benchLog writes n combined lines: about 5,000 clients (a few hundred
// of them busy), 2 requests a millisecond, POSTs to /login among them.
func benchLog(tb testing.TB, n int) string {
	path := filepath.Join(tb.TempDir(), "access.log")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	rng := rand.New(rand.NewPCG(1, 2))
	clients := make([]string, 5000)
	for i := range clients {
		if i%5 == 0 {
			clients[i] = fmt.Sprintf("2001:db8:%x:%x::%x", rng.IntN(1<<16), rng.IntN(1<<16), rng.IntN(1<<16))
		} else {
			clients[i] = fmt.Sprintf("%d.%d.%d.%d", 1+rng.IntN(223), rng.IntN(256), rng.IntN(256), 1+rng.IntN(254))
		}
	}
	t := time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)
	for i := range n {
		t = t.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
		c := clients[rng.IntN(len(clients))]
		if rng.IntN(4) == 0 {
			c = clients[rng.IntN(300)] // the busy ones
		}
		method, path := "GET", benchPaths[rng.IntN(len(benchPaths))]
		if path == "/login" && i%2 == 0 {
			method = "POST"
		}
		fmt.Fprintf(w, "%s - - [%s] \"%s %s%s HTTP/1.1\" %d %d \"-\" \"%s\"\n", c, t.Format("02/Jan/2006:15:04:05 -0700"),
			method, path, benchQueries[rng.IntN(len(benchQueries))], []int{200, 200, 200, 304, 404}[rng.IntN(5)],
			rng.IntN(50000), benchUAs[rng.IntN(len(benchUAs))])
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	return path
}

// benchLines is the lines of BenchmarkReplay's log: each iteration
// replays all of them.
const benchLines = 200_000

// BenchmarkReplay replays a combined log against a configuration of five
// policies (and, in /against, a second one), reading the file, building
// requests, deciding and tallying; it reports lines per second. Issue
// 18's target is 1,000,000 lines a minute: 16,667 a second.
func BenchmarkReplay(b *testing.B) {
	dir := b.TempDir()
	cfg := filepath.Join(dir, "a.toml")
	if err := os.WriteFile(cfg, []byte(benchConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	against := filepath.Join(dir, "b.toml")
	if err := os.WriteFile(against, []byte(benchConfig+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	log := benchLog(b, benchLines)
	for _, bc := range []struct {
		name    string
		against string
	}{{"one", ""}, {"against", against}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var replayed int64
			for b.Loop() {
				rep, err := Run(context.Background(), Options{Config: cfg, Against: bc.against, Logs: []string{log}})
				if err != nil {
					b.Fatal(err)
				}
				if rep.Read.Replayed != benchLines {
					b.Fatalf("replayed %d of %d lines", rep.Read.Replayed, benchLines)
				}
				replayed += rep.Read.Replayed
			}
			b.ReportMetric(float64(replayed)/b.Elapsed().Seconds(), "lines/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(replayed), "ns/line")
		})
	}
}
