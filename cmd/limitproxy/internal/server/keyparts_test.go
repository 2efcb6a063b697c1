package server

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Real upstreams that read a repeated or malformed cookie or query
// parameter each their own way — nginx ($cookie_, $arg_: the first, names
// in any case), Flask (Werkzeug: the first; no escape is malformed to it)
// and Go (r.Cookie skips a malformed cookie, url.ParseQuery drops a pair
// with a bad escape or a ';') — each answer "sid=… k=…", what they read.

const keyPartsPolicies = `
[[policy]]
name = "c"
upstream = "up"
match = { path = "/c" }
key = ["cookie:sid"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "q"
upstream = "up"
match = { path = "/q" }
key = ["query:k"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "default"
upstream = "up"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 100000
  window = "1h"
`

func startKeyNginx(t *testing.T) string {
	addr := runNginx(t, "127.0.0.1", func(port int) string {
		return fmt.Sprintf(`  server {
    listen 127.0.0.1:%[1]d default_server;
    location / { return 200 "sid=$cookie_sid k=$arg_k\n"; }
  }
`, port)
	})
	return addr
}

func startKeyFlask(t *testing.T) string {
	dir := t.TempDir()
	return startOnPort(t, "127.0.0.1", func(port int) proc {
		app := fmt.Sprintf(`
import logging
from flask import Flask, request
logging.getLogger("werkzeug").setLevel(logging.ERROR)
app = Flask(__name__)

@app.route("/", defaults={"p": ""})
@app.route("/<path:p>")
def read(p):
    return "sid=%%s k=%%s\n" %% (request.cookies.get("sid") or "", request.args.get("k") or "")

app.run(host="127.0.0.1", port=%d)
`, port)
		os.WriteFile(filepath.Join(dir, "app.py"), []byte(app), 0o644)
		return proc{name: "python3", args: []string{filepath.Join(dir, "app.py")}}
	})
}

func startKeyGo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := ""
		if c, err := r.Cookie("sid"); err == nil {
			sid = c.Value
		}
		fmt.Fprintf(w, "sid=%s k=%s\n", sid, r.URL.Query().Get("k"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// keyProbe is one request naming a keyed part ambiguously; keyed is the
// value ambiguous_key_parts = "rewrite" keys it by.
type keyProbe struct {
	req, path, keyed string
}

func keyProbes(i int) []keyProbe {
	req := func(target string, headers ...string) string {
		return "GET " + target + " HTTP/1.1\r\nHost: example.com\r\n" + strings.Join(append(headers, "Connection: close"), "\r\n") + "\r\n\r\n"
	}
	j := fmt.Sprint(i)
	junk := "junk" + j
	return []keyProbe{
		{req("/c", "Cookie: sid="+junk+"; sid=real"), "/c", "real"},
		{req("/c", "Cookie: sid="+junk, "Cookie: sid=real"), "/c", "real"},
		{req("/c", `Cookie: sid="`+junk+"; sid=real"), "/c", "real"},
		{req("/c", "Cookie: sid="+junk+" x; sid=real"), "/c", "real"},
		{req("/c", "Cookie: SID="+junk+"; sid=real"), "/c", "real"},
		{req("/c", "Cookie: s%69d="+junk+"; sid=real"), "/c", "real"},
		{req("/c", "Cookie: a="+j+" sid=junk; sid=real"), "/c", "real"},
		{req("/c", "Cookie: a="+j+",sid=junk; sid=real"), "/c", "real"},
		{req("/c", "Cookie: sid", "Cookie: a="+j+"; sid=real"), "/c", "real"},
		{req("/c", "Cookie: sid=real; sid="+junk), "/c", junk},
		{req("/q?k=" + junk + "&k=real"), "/q", "real"},
		{req("/q?k=%zz" + j + "&k=real"), "/q", "real"},
		{req("/q?%6b=" + junk + "&k=real"), "/q", "real"},
		{req("/q?K=" + junk + "&k=real"), "/q", "real"},
		{req("/q?k+=" + junk + "&k=real"), "/q", "real"},
		{req("/q?x=" + j + ";k=junk&k=real"), "/q", "real"},
		{req("/q?k=real&k=" + junk), "/q", junk},
	}
}

// TestAmbiguousKeyPartsRealUpstreams: in front of nginx, Flask and Go, a
// repeated or malformed keyed cookie or parameter gets 400 by default and
// never reaches the upstream; with ambiguous_key_parts = "rewrite" every
// upstream reads exactly the value the request was keyed by, so rotating
// junk in front of the real value gets no fresh budget: 2 answers read
// "real", whatever the junk.
func TestAmbiguousKeyPartsRealUpstreams(t *testing.T) {
	t.Parallel()
	upstreams := map[string]func(*testing.T) string{"nginx": startKeyNginx, "flask": startKeyFlask, "go": startKeyGo}
	for _, name := range []string{"nginx", "flask", "go"} {
		t.Run(name, func(t *testing.T) {
			addr := upstreams[name](t)
			for _, mode := range []string{"", "ambiguous_key_parts = \"rewrite\"\n"} {
				src := fmt.Sprintf("[server]\nlisten = \"127.0.0.1:0\"\n%s[admin]\nlisten = \"\"\n[log]\nlevel = \"error\"\n"+
					"[[upstream]]\nname = \"up\"\ntargets = [\"http://%s\"]\n", mode, addr) + keyPartsPolicies
				proxy := startServer(t, "keys.toml", src).Proxy.String()
				real := map[string]int{}
				for i := range 3 {
					for _, p := range keyProbes(i) {
						st, body := probe(t, proxy, p.req)
						if mode == "" {
							if st != 400 || !strings.Contains(body, "repeated or malformed") {
								t.Errorf("%q: %d %q, want 400", p.req, st, body)
							}
							continue
						}
						if st == 429 {
							continue
						}
						read := "sid="
						if p.path == "/q" {
							read = "k="
						}
						_, after, _ := strings.Cut(body, read)
						got, _, _ := strings.Cut(strings.TrimSpace(after), " ")
						if st != 200 || got != p.keyed {
							t.Errorf("%q: %d, the upstream read %q (%q), keyed by %q", p.req, st, got, body, p.keyed)
						}
						if got == "real" {
							real[p.path]++
						}
					}
				}
				if mode == "" {
					// The refusals counted nothing: real keeps its budget.
					for _, path := range []string{"/c", "/q?k=real"} {
						for i, want := range []int{200, 200, 429} {
							req := "GET " + path + " HTTP/1.1\r\nHost: example.com\r\nCookie: sid=real\r\nConnection: close\r\n\r\n"
							if st, _ := probe(t, proxy, req); st != want {
								t.Errorf("%s: legitimate request %d: %d, want %d", path, i, st, want)
							}
						}
					}
				} else if real["/c"] != 2 || real["/q"] != 2 {
					t.Errorf("answers that read real: %v, want 2 per path", real)
				}
			}
		})
	}
}
