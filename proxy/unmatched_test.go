package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// unmatchedConfig has one policy, /login, and the upstreams UPSTREAMS
// (each "name=URL"), with SERVER added to [server].
const unmatchedConfig = `
[server]
SERVER
UPSTREAMS
[[policy]]
name = "login"
upstream = "app"
match = { path = "/login" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 1
  window = "1h"
`

// startUnmatched runs a proxy of unmatchedConfig over loopback with
// upstreams app and, if two, other, each answering its name, and returns
// its URL and its access lines.
func startUnmatched(t *testing.T, server string, two bool) (string, *observer.ObservedLogs) {
	t.Helper()
	ups := ""
	for _, name := range []string{"app", "other"}[:map[bool]int{false: 1, true: 2}[two]] {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(srv.Close)
		ups += "[[upstream]]\nname = \"" + name + "\"\ntargets = [\"" + srv.URL + "\"]\n"
	}
	src := strings.NewReplacer("SERVER", server, "UPSTREAMS", ups).Replace(unmatchedConfig)
	cfg, err := config.Parse("u.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	srv := httptest.NewServer(New(set, Options{Logger: zap.New(core), AccessLog: true}))
	t.Cleanup(srv.Close)
	return srv.URL, logs
}

// rawGet sends target as it is (a client library would clean it) and
// returns the status and body.
func rawGet(t *testing.T, base, target string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// TestUnmatched: by default a request no policy matches is forwarded to
// the only upstream, counted against nothing (decision unmatched in the
// log, any number of times), while one that some upstream reads as a
// policy's path (/LOGIN, /login/, /login;x) is refused 400 rather than
// forwarded unlimited; with several upstreams it goes to
// unmatched_upstream, or is answered 404 when none is named; unmatched =
// "refuse" answers it 404.
func TestUnmatched(t *testing.T) {
	t.Run("forward", func(t *testing.T) {
		url, logs := startUnmatched(t, "", false)
		for range 3 {
			if code, body := rawGet(t, url, "/other"); code != 200 || body != "app" {
				t.Fatalf("/other: %d %q, want 200 from app", code, body)
			}
		}
		l := waitLines(t, logs, 3)[2]
		if l["decision"] != "unmatched" || l["policy"] != "" || l["upstream"] != "app" || l["status"] != int64(200) {
			t.Errorf("access line %v, want decision unmatched, upstream app, status 200", l)
		}
		if code, _ := rawGet(t, url, "/login"); code != 200 {
			t.Fatalf("/login: %d", code)
		}
		for _, target := range []string{"/LOGIN", "/login/", "/login;x=1", "/Login/"} {
			if code, body := rawGet(t, url, target); code != 400 || !strings.Contains(body, "which a policy matches; as sent it matches none") {
				t.Errorf("%s: %d %s, want 400: it is /login to some upstream", target, code, body)
			}
		}
		if code, _ := rawGet(t, url, "/login"); code != 429 {
			t.Errorf("/login after its spellings: %d, want 429 (its one request spent, none of the spellings forwarded)", code)
		}
	})
	t.Run("several upstreams", func(t *testing.T) {
		url, _ := startUnmatched(t, "", true)
		if code, _ := rawGet(t, url, "/other"); code != 404 {
			t.Errorf("/other with two upstreams and none named: %d, want 404", code)
		}
		url, _ = startUnmatched(t, `unmatched_upstream = "other"`, true)
		if code, body := rawGet(t, url, "/other"); code != 200 || body != "other" {
			t.Errorf("/other with unmatched_upstream = other: %d %q", code, body)
		}
	})
	t.Run("refuse", func(t *testing.T) {
		url, logs := startUnmatched(t, `unmatched = "refuse"`, false)
		if code, body := rawGet(t, url, "/other"); code != 404 || !strings.Contains(body, "no policy matches this request") {
			t.Errorf("/other refused: %d %s", code, body)
		}
		if l := waitLines(t, logs, 1)[0]; l["decision"] != "unmatched" || l["upstream"] != "" {
			t.Errorf("access line %v", l)
		}
	})
}

// TestUnmatchedConfig: unmatched_upstream must name an upstream, and says
// nothing with unmatched = "refuse"; the only upstream is taken by
// default.
func TestUnmatchedConfig(t *testing.T) {
	ups := "[[upstream]]\nname = \"app\"\ntargets = [\"http://127.0.0.1:1\"]\n"
	for server, want := range map[string]string{
		`unmatched_upstream = "ap"`:                                  `server.unmatched_upstream: unknown upstream "ap"`,
		`unmatched = "refuse"` + "\n" + `unmatched_upstream = "app"`: `server.unmatched_upstream: names where unmatched requests go, but server.unmatched = "refuse" answers them 404`,
		`unmatched = "drop"`:                                         `server.unmatched: "drop" is not one of "forward", "refuse"`,
	} {
		_, err := config.Parse("u.toml", []byte(strings.NewReplacer("SERVER", server, "UPSTREAMS", ups).Replace(unmatchedConfig)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %s", server, err, want)
		}
	}
	cfg, err := config.Parse("u.toml", []byte(strings.NewReplacer("SERVER", "", "UPSTREAMS", ups).Replace(unmatchedConfig)))
	if err != nil || cfg.Server.Unmatched != config.UnmatchedForward || cfg.Server.UnmatchedUpstream != "app" {
		t.Fatalf("default: %v %q %q", err, cfg.Server.Unmatched, cfg.Server.UnmatchedUpstream)
	}
}

// TestForwardAuthUnmatched: behind forward auth, a request no policy
// matches is allowed (200, counted against nothing) under the default
// unmatched = "forward", while a spelling of a policy's path is refused.
func TestForwardAuthUnmatched(t *testing.T) {
	cfg, err := config.Parse("fa.toml", []byte(strings.Replace(forwardAuthConfig, `unmatched = "refuse"`, "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	h := New(set, Options{Now: newClock().now}).ForwardAuth()
	for range 5 {
		if w := ask(h, "10.0.0.1", "X-Forwarded-Uri", "/nothing"); w.Code != 200 {
			t.Fatalf("unmatched: %d %s, want 200", w.Code, w.Body)
		}
	}
	if w := ask(h, "10.0.0.1", "X-Forwarded-Uri", "/LIMITED"); w.Code != 400 {
		t.Errorf("/LIMITED beside a /limited policy: %d, want 400", w.Code)
	}
}
