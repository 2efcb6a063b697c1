package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/internal/testproc"
)

// The bypasses of limits found by trying limitproxy as a hostile client
// would, each tried again here against real upstreams that normalize
// requests their own ways: nginx (location = /login, server_name), Flask
// (Werkzeug upper-cases methods, joins repeated headers), and a Go server
// (ServeMux, Header.Get). Every upstream answers "PROTECTED" from its
// protected handlers; with a limit of 2 an hour, no probe may make a third
// one answer. scripts/test.sh installs nginx when it is missing; Flask is
// part of this machine image's Python.

const realUpstreamPolicies = `
[[policy]]
name = "login"
upstream = "up"
match = { methods = ["POST"], path = "/login" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "api"
upstream = "up"
match = { path_prefix = "/api/" }
key = ["header:X-API-Key"]
on_missing = "reject"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 2
  window = "1h"

[[policy]]
name = "host"
upstream = "up"
match = { hosts = ["limited.example.com"] }
key = []
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

// startProcessWith runs a server process until the test ends (stopped by
// its PID), with env added to its environment and files handed to it as
// its descriptors 3, 4, … (exec.Cmd's ExtraFiles): a listener the test
// made, which no other process can take meanwhile; it waits until the
// process listens on addr.
func startProcessWith(t *testing.T, addr string, env []string, files []*os.File, name string, args ...string) {
	t.Helper()
	if out, ok := launch(t, addr, proc{env: env, files: files, name: name, args: args}); !ok {
		t.Fatalf("%s did not listen on %s: %s", name, addr, out)
	}
}

// proc is a server process to start: its program, arguments, environment
// added, and descriptors handed to it.
type proc struct {
	env   []string
	files []*os.File
	name  string
	args  []string
}

// startOnPort runs the server process that at(port) describes (writing
// the configuration that names port, if any) on a port of host free when
// chosen, until the test ends, and returns its address. A port that
// another process takes between the choice and the process's bind (a
// test's server of its own, another test's process) is found out, the
// process owning no socket that listens there, and another port tried, up
// to five in all.
func startOnPort(t *testing.T, host string, at func(port int) proc) string {
	t.Helper()
	var outs []string
	for range 5 {
		port := loopbackPort(t, host)
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		p := at(port)
		out, ok := launch(t, addr, p)
		if ok {
			return addr
		}
		outs = append(outs, addr+": "+out)
	}
	t.Fatalf("no free port held: %s", strings.Join(outs, "\n"))
	return ""
}

// launch starts p, stopped (by its PID) when the test ends, and waits
// until it listens on addr: a socket of its own in the LISTEN state on
// addr's port, not a connection accepted by whatever else listens there.
// It reports false, with the process's output, when the process exits or
// has not listened within 20 s; the process is stopped then.
func launch(t *testing.T, addr string, p proc) (string, bool) {
	t.Helper()
	path, err := exec.LookPath(p.name)
	if err != nil {
		t.Fatalf("%s is not installed (scripts/test.sh installs it): %v", p.name, err)
	}
	cmd := exec.Command(path, p.args...)
	if p.env != nil {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.ExtraFiles = p.files
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			return out.String(), false
		default:
		}
		if testproc.ListensOn(cmd.Process.Pid, port) {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Cleanup(stop)
				return "", true
			}
		}
		if time.Now().After(deadline) {
			stop()
			return out.String(), false
		}
		time.Sleep(50 * time.Millisecond) // a real process: nothing to wait on but its port
	}
}

func startNginx(t *testing.T) string {
	addr := runNginx(t, "127.0.0.1", func(port int) string {
		return fmt.Sprintf(`  server {
    listen 127.0.0.1:%[1]d;
    server_name limited.example.com;
    location / { return 200 "PROTECTED\n"; }
  }
  server {
    listen 127.0.0.1:%[1]d default_server;
    location = /login { return 200 "PROTECTED\n"; }
    location /api/ {
      if ($http_x_api_key = "realkey") { return 200 "PROTECTED\n"; }
      return 401 "no\n";
    }
    location / { return 200 "other\n"; }
  }
`, port)
	})
	return addr
}

func startFlask(t *testing.T) string {
	return runFlask(t, `
@app.route("/login", methods=ALL)
def login():
    return "PROTECTED\n"

@app.route("/api/x", methods=ALL)
def api():
    if request.headers.get("X-API-Key") == "realkey":
        return "PROTECTED\n"
    return "no\n", 401

@app.route("/", defaults={"p": ""}, methods=ALL)
@app.route("/<path:p>", methods=ALL)
def other(p):
    return "other\n"
`)
}

// runFlask starts a Flask app (Werkzeug's server, stopped when the test
// ends) on a free loopback port with the routes given, which may use
// request and ALL (every usual method); it returns the app's address.
func runFlask(t *testing.T, routes string) string {
	t.Helper()
	dir := t.TempDir()
	// The listening socket is made here and handed to Werkzeug as fd 3
	// (what app.run serves with: threaded), so that no other test can
	// take its port between choosing it and Flask's bind (a port chosen
	// free and bound later was, once, another test's by then).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close() // f, a copy, keeps it listening
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the process holds its own copy once started
	addr := ln.Addr().String()
	app := fmt.Sprintf(`
import logging
from flask import Flask, request
from werkzeug.serving import make_server
logging.getLogger("werkzeug").setLevel(logging.ERROR)
app = Flask(__name__)
ALL = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
%s
make_server("127.0.0.1", %d, app, threaded=True, fd=3).serve_forever()
`, routes, ln.Addr().(*net.TCPAddr).Port)
	os.WriteFile(filepath.Join(dir, "app.py"), []byte(app), 0o644)
	startProcessWith(t, addr, nil, []*os.File{f}, "python3", filepath.Join(dir, "app.py"))
	return addr
}

// startGoUpstream is a Go server as one is usually written: ServeMux
// patterns and Header.Get.
func startGoUpstream(t *testing.T) string {
	mux := http.NewServeMux()
	protected := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "PROTECTED\n") }
	mux.HandleFunc("POST /login", protected)
	mux.HandleFunc("/api/x", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "realkey" {
			protected(w, r)
			return
		}
		http.Error(w, "no", http.StatusUnauthorized)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "other\n") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// startProxyFor runs limitproxy with realUpstreamPolicies in front of addr.
func startProxyFor(t *testing.T, addr string) string {
	t.Helper()
	src := fmt.Sprintf("[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"\"\n[log]\nlevel = \"error\"\n"+
		"[[upstream]]\nname = \"up\"\ntargets = [\"http://%s\"]\npreserve_host = true\n", addr) + realUpstreamPolicies
	return startServer(t, "real.toml", src).Proxy.String()
}

// probe sends one raw request and returns its status and body.
func probe(t *testing.T, addr, request string) (int, string) {
	t.Helper()
	status, body, err := exchange(addr, request)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	return status, body
}

// exchange sends one raw request (its bytes as they are) on a new
// connection to addr and returns the response's status and body.
func exchange(addr, request string) (int, string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestBypassRealUpstreams(t *testing.T) {
	t.Parallel()
	upstreams := map[string]func(*testing.T) string{
		"nginx": startNginx,
		"flask": startFlask,
		"go":    startGoUpstream,
	}
	for _, name := range []string{"nginx", "flask", "go"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each its own upstream process and proxy: Flask's start-up overlaps the others
			proxy := startProxyFor(t, upstreams[name](t))
			req := func(line string, headers ...string) string {
				return line + "\r\nHost: api.example.com\r\n" + strings.Join(append(headers, "Content-Length: 0", "Connection: close"), "\r\n") + "\r\n\r\n"
			}
			// Each group of probes targets one protected handler, after
			// its two legitimate requests.
			groups := []struct {
				name   string
				first  string
				probes []string
			}{
				{"login path", req("POST /login HTTP/1.1"), []string{
					req("POST /.well-known/acme-challenge/%2e%2e/%2e%2e/login HTTP/1.1"),
					req("POST /.well-known/acme-challenge/../../login HTTP/1.1"),
					req("POST //login HTTP/1.1"),
					req("POST /./login HTTP/1.1"),
					req("POST /a/../login HTTP/1.1"),
					req("POST /%6cogin HTTP/1.1"),
					req("POST /%6C%6F%67%69%6E HTTP/1.1"),
					req("POST /login?x=1 HTTP/1.1"),
					req("POST http://api.example.com//login HTTP/1.1"),
					req("post /login HTTP/1.1"),
					req("Post /login HTTP/1.1"),
					req("POST /a%2f..%2flogin HTTP/1.1"),
					req("POST /%2e%2e/login HTTP/1.1"),
					req("POST /login%00 HTTP/1.1"),
				}},
				{"api key", req("GET /api/x HTTP/1.1", "X-API-Key: realkey"), nil},
			}
			for i := range 20 {
				groups[1].probes = append(groups[1].probes,
					req("GET /api/x HTTP/1.1", "X-API-Key: realkey", fmt.Sprintf("X-API-Key: junk%d", i)),
					req("GET /api/x HTTP/1.1", fmt.Sprintf("X-API-Key: realkey, junk%d", i)),
					req("GET /api/x HTTP/1.1", fmt.Sprintf("X-Api-Key: junk%d", i), "X_API_KEY: realkey"),
				)
			}
			if name == "nginx" {
				h := func(host string) string {
					return "GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"
				}
				groups = append(groups, struct {
					name   string
					first  string
					probes []string
				}{"host", h("limited.example.com"), []string{
					h("limited.example.com."), h("LIMITED.example.com"), h("limited.example.com:8080"),
					h("limited.example.com.:80"), h("Limited.Example.Com."),
				}})
			}
			for _, g := range groups {
				protected := 0
				for _, r := range append([]string{g.first, g.first}, g.probes...) {
					if _, body := probe(t, proxy, r); strings.Contains(body, "PROTECTED") {
						protected++
					}
				}
				if protected > 2 {
					t.Errorf("%s: the protected handler answered %d times; the limit is 2", g.name, protected)
				} else if protected < 2 {
					t.Errorf("%s: the protected handler answered %d times; the two legitimate requests should have reached it", g.name, protected)
				}
			}
		})
	}
}

// TestUpgradesStripped: an upstream that accepts every upgrade (as an h2c
// server does) must be offered none but WebSocket through limitproxy:
// once switched, the connection would carry any number of requests past a
// per-request limit. An upstream that switches to whatever it is offered
// sees no Upgrade but websocket.
func TestUpgradesStripped(t *testing.T) {
	t.Parallel()
	// An upstream that switches to any protocol it is offered.
	eager := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up := r.Header.Get("Upgrade")
		if up == "" {
			io.WriteString(w, "plain\n")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\nTUNNEL %s\n", up, up)
		brw.Flush()
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go eager.Serve(ln)
	t.Cleanup(func() { eager.Close() })
	proxy := startProxyFor(t, ln.Addr().String())
	for _, c := range []struct {
		upgrade    string
		wantStatus int
	}{
		{"h2c", 200},
		{"H2C", 200},
		{"TLS/1.2", 200},
		{"h2c, websocket", 101},
		{"websocket", 101},
		{"WebSocket", 101},
	} {
		status, _ := probe(t, proxy, "GET / HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: "+c.upgrade+"\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
		if status != c.wantStatus {
			t.Errorf("Upgrade: %s: %d, want %d", c.upgrade, status, c.wantStatus)
		}
	}
}

// runNginx starts nginx (Debian's, stopped when the test ends) listening
// on host, a loopback address, with the server blocks servers gives for
// the port it chose inside an http block that logs nothing and keeps its
// temporary files in the test's directory; it returns nginx's address.
func runNginx(t *testing.T, host string, servers func(port int) string) string {
	t.Helper()
	dir := t.TempDir()
	return startOnPort(t, host, func(port int) proc {
		conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
%[2]s}
`, dir, servers(port))
		os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644)
		return proc{name: "nginx", args: []string{"-p", dir, "-c", filepath.Join(dir, "nginx.conf")}}
	})
}

// TestStartOnPortTaken: a port that another listener takes between its
// choice and the process's bind is found out, though a connection to it
// succeeds (the other listener accepts it), and the process started again
// on another port.
func TestStartOnPortTaken(t *testing.T) {
	t.Parallel()
	var taken []int
	addr := startOnPort(t, "127.0.0.1", func(port int) proc {
		if len(taken) == 0 {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() { // accepts, as a server of another test would
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}
		taken = append(taken, port)
		return proc{name: "python3", args: []string{"-m", "http.server", "--bind", "127.0.0.1", strconv.Itoa(port)}}
	})
	if len(taken) != 2 || addr != net.JoinHostPort("127.0.0.1", strconv.Itoa(taken[1])) {
		t.Fatalf("ports tried %v, listening on %s: want the second", taken, addr)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}
