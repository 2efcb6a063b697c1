package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitproxy/limitproxy/internal/redistest"
)

// TestCheckConnect: `check -connect` connects to the configured Redis as
// serving would: a Redis that answers passes; one that does not, and a
// Redis Cluster node given as the one address (a single-node client that
// would take every MOVED for an outage), fail, named. Without -connect
// the file alone is checked.
func TestCheckConnect(t *testing.T) {
	t.Parallel()
	single := redistest.Start(t)
	dead := redistest.Start(t)
	dead.Kill()
	cluster := redistest.Cluster(t)
	file := func(addrs ...string) string {
		path := filepath.Join(t.TempDir(), "c.toml")
		q := make([]string, len(addrs))
		for i, a := range addrs {
			q[i] = fmt.Sprintf("%q", a)
		}
		text := fmt.Sprintf(`[server]
listen = "127.0.0.1:0"
[store]
backend = "redis"
[store.redis]
addrs = [%s]
timeout = "200ms"
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "p"
upstream = "app"
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
`, strings.Join(q, ", "))
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"single", []string{"-connect", "-config", file(single.Addr())}, 0, "store: ok: redis answers"},
		{"cluster", []string{"-config", file(cluster...), "-connect"}, 0, "store: ok: redis answers"},
		{"down", []string{"-config", file(dead.Addr()), "-connect"}, 1, "store.redis: redis: dial tcp " + dead.Addr()},
		{"one cluster node", []string{"-config", file(cluster[0]), "-connect"}, 1, "store.redis.addrs: redis at " + cluster[0] + " is a Redis Cluster node"},
		{"no connect", []string{"-config", file(cluster[0])}, 0, "ok: 1 policy, 1 limit, 1 upstream"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"check"}, c.args...), &stdout, &stderr)
		code := exitCode(err, &stderr)
		text := stdout.String()
		if err != nil {
			text = err.Error()
		}
		if code != c.code || !strings.Contains(text, c.out) {
			t.Errorf("%s: exit %d, %q; want exit %d with %q", c.name, code, text, c.code, c.out)
		}
	}
}

// TestCheckUnmatchedNote: `check` says what becomes of a request no
// policy matches when no policy matches every request: forwarded to the
// only upstream by default, 404 with unmatched = "refuse", 404 with two
// upstreams and none named; nothing when a policy matches them all.
func TestCheckUnmatchedNote(t *testing.T) {
	t.Parallel()
	const policyText = `
[[policy]]
name = "login"
upstream = "app"
match = MATCH
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 5
  window = "1m"
`
	app := "[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:1\"]\n"
	other := "[[upstream]]\nname = \"other\"\ntargets = [\"http://127.0.0.1:2\"]\n"
	for _, c := range []struct {
		name, server, upstreams, match, want string
	}{
		{"forward", "", app, `{ path = "/login" }`, `c.toml: note: no policy matches every request: a request none matches is forwarded to upstream "app", counted against no limit ([server] unmatched = "forward"; "refuse" answers it 404)`},
		{"refuse", `unmatched = "refuse"`, app, `{ path = "/login" }`, `c.toml: note: no policy matches every request: a request none matches is answered 404 ([server] unmatched = "refuse")`},
		{"two upstreams", "", app + other, `{ path = "/login" }`, `c.toml: note: no policy matches every request: a request none matches is answered 404, since there are 2 upstreams and [server] unmatched_upstream names none to forward it to`},
		{"header match", "", app, `{ path = "/login", headers = { "X-Plan" = "free" } }`, `c.toml: note: no policy matches every request: a request none matches is forwarded to upstream "app", counted against no limit ([server] unmatched = "forward"; "refuse" answers it 404); a client leaves policy "login" for unlimited forwarding by not sending the headers or token claims it matches on: add a catch-all policy, or set [server] unmatched = "refuse"`},
		{"header match, refused", `unmatched = "refuse"`, app, `{ headers = { "X-Plan" = "free" } }`, `c.toml: note: no policy matches every request: a request none matches is answered 404 ([server] unmatched = "refuse")`},
		{"catch-all", "", app, `{}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.toml")
			text := "[server]\nlisten = \"127.0.0.1:0\"\n" + c.server + "\n[admin]\nlisten = \"\"\n" + c.upstreams + strings.Replace(policyText, "MATCH", c.match, 1)
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), []string{"check", "-config", path}, &stdout, &stderr); err != nil {
				t.Fatalf("check: %v %s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(stdout.String(), path, "c.toml")), "\n")
			want := []string{"c.toml: ok: 1 policy, 1 limit, " + map[bool]string{false: "1 upstream", true: "2 upstreams"}[c.name == "two upstreams"] + ", listen 127.0.0.1:0"}
			if c.want != "" {
				want = append([]string{c.want}, want...)
			}
			if strings.Join(lines, "\n") != strings.Join(want, "\n") {
				t.Errorf("stdout:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
