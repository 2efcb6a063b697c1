package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// adminCall is one request to a test server's admin listener, with the
// Host and header fields given (name, value, …); it returns the status,
// the Content-Type and the body.
func adminCall(t *testing.T, r *running, method, path, host, body string, fields ...string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, r.admin+path, strings.NewReader(body))
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// reloadsCounted reads limitproxy_config_reloads_total of both results
// from the admin listener's /metrics.
func reloadsCounted(t *testing.T, r *running) string {
	t.Helper()
	_, _, body := adminCall(t, r, "GET", "/metrics", "", "")
	var lines []string
	for l := range strings.Lines(body) {
		if strings.HasPrefix(l, "limitproxy_config_reloads_total{") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) != 2 {
		t.Fatalf("reload counters %q in /metrics", lines)
	}
	return strings.Join(lines, ", ")
}

// TestAdminRebinding: a page on rebind.attacker.example whose name now
// resolves to 127.0.0.1 reaches the admin listener over loopback with
// its own name as Host, and, to the browser, same-origin: it may send
// JSON, Origin and Sec-Fetch-Site: same-origin. Every path, read or
// write, gets 421 problem+json, and nothing changes: the override file,
// the ban and the reload counter stay as they were.
func TestAdminRebinding(t *testing.T) {
	file := filepath.Join(t.TempDir(), "overrides.json")
	r := startFile(t, func(path, up string) {
		text := configText(up, 2, "1/h", "") + "  [policy.ban]\n  duration = \"1h\"\n"
		text = strings.Replace(text, "[log]\n", "[store]\noverrides_file = \""+file+"\"\n[log]\n", 1)
		os.WriteFile(path, []byte(text), 0o644)
	})
	// The operator's override, and a ban of 127.0.0.1.
	if c, _, b := adminCall(t, r, "PUT", "/api/v1/policies/all/overrides/192.0.2.1", "", `{"scale": 2}`, "Content-Type", "application/json"); c != 200 {
		t.Fatalf("operator's PUT: %d %s", c, b)
	}
	for range 4 {
		resp, err := http.Get(r.proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	bans := func() string { // key, level and end of each ban
		_, _, b := adminCall(t, r, "GET", "/api/v1/policies/all/bans", "", "")
		var v struct {
			Bans []struct {
				Key, Until string
				Level      int
			}
		}
		json.Unmarshal([]byte(b), &v)
		return fmt.Sprint(v.Bans)
	}
	banned := bans()
	if !strings.Contains(banned, " 1}") {
		t.Fatalf("no ban to lift: %s", banned)
	}
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	reloads := reloadsCounted(t, r)

	_, port, _ := net.SplitHostPort(strings.TrimPrefix(r.admin, "http://"))
	for _, host := range []string{"rebind.attacker.example:" + port, "rebind.attacker.example", "localhost.attacker.example:" + port, "127.0.0.1.nip.example"} {
		origin := "http://" + host
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/api/v1/config", ""},
			{"GET", "/metrics", ""},
			{"GET", "/healthz", ""},
			{"GET", "/dashboard", ""},
			{"GET", "/api/v1/policies/all/bans", ""},
			{"PUT", "/api/v1/policies/all/overrides/127.0.0.1", `{"scale": 100000}`},
			{"DELETE", "/api/v1/policies/all/overrides/192.0.2.1", ""},
			{"DELETE", "/api/v1/policies/all/bans/127.0.0.1", ""},
			{"DELETE", "/api/v1/policies/all/keys/127.0.0.1", ""},
			{"POST", "/api/v1/reload", ""},
		} {
			code, ct, body := adminCall(t, r, c.method, c.path, host, c.body,
				"Content-Type", "application/json", "Origin", origin, "Sec-Fetch-Site", "same-origin")
			var p struct {
				Status int
				Title  string
			}
			if code != http.StatusMisdirectedRequest || ct != "application/problem+json" || json.Unmarshal([]byte(body), &p) != nil || p.Status != 421 {
				t.Errorf("Host %s: %s %s: %d %s %q, want 421 problem+json", host, c.method, c.path, code, ct, body)
			}
		}
	}
	after, _ := os.ReadFile(file)
	if !bytes.Equal(before, after) {
		t.Errorf("overrides file changed:\n%s\nwas:\n%s", after, before)
	}
	if now := bans(); now != banned {
		t.Errorf("bans changed:\n%s\nwas:\n%s", now, banned)
	}
	if now := reloadsCounted(t, r); now != reloads {
		t.Errorf("reloads: %s, was %s", now, reloads)
	}
}

// TestAdminCrossSite: a request that changes something is refused when a
// browser could have sent it from another page: a cross-site form or
// text/plain POST (a "simple" request, sent without a preflight), an
// Origin not of the Host, Sec-Fetch-Site cross-site or same-site (403),
// a body-less one too (a no-cors fetch), or a body or any Content-Type
// but application/json (415). A CORS preflight is granted nothing. No
// reload happens. A same-origin JSON request with the token works, and
// so does the bare command an operator types: curl -X POST or -X DELETE
// without a body or a Content-Type.
func TestAdminCrossSite(t *testing.T) {
	t.Setenv("LIMITPROXY_TEST_ADMIN_TOKEN", "s3cret")
	r := startFile(t, func(path, up string) {
		text := configText(up, 2, "1/h", "")
		text = strings.Replace(text, "[admin]\n", "[admin]\ntoken_env = \"LIMITPROXY_TEST_ADMIN_TOKEN\"\n", 1)
		os.WriteFile(path, []byte(text), 0o644)
	})
	auth := "Bearer s3cret"
	self := strings.TrimPrefix(r.admin, "http://")
	reloads := reloadsCounted(t, r)
	for _, c := range []struct {
		name, method, path string
		want               int
		fields             []string
	}{
		{"text/plain from another site", "POST", "/api/v1/reload", 403, []string{"Content-Type", "text/plain", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}},
		{"text/plain, Origin only (older browser)", "POST", "/api/v1/reload", 403, []string{"Content-Type", "text/plain", "Origin", "http://evil.example"}},
		{"form, Sec-Fetch-Site only", "POST", "/api/v1/reload", 403, []string{"Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site"}},
		{"form with the token", "POST", "/api/v1/reload", 403, []string{"Content-Type", "multipart/form-data; boundary=x", "Origin", "http://evil.example", "Authorization", auth}},
		{"JSON, Origin of another host", "POST", "/api/v1/reload", 403, []string{"Content-Type", "application/json", "Origin", "http://evil.example", "Authorization", auth}},
		{"JSON, Origin of another port", "POST", "/api/v1/reload", 403, []string{"Content-Type", "application/json", "Origin", "http://127.0.0.1:1", "Authorization", auth}},
		{"JSON, Origin null", "POST", "/api/v1/reload", 403, []string{"Content-Type", "application/json", "Origin", "null", "Authorization", auth}},
		{"JSON, same-site", "POST", "/api/v1/reload", 403, []string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-site", "Authorization", auth}},
		{"DELETE from another site", "DELETE", "/api/v1/policies/all/keys/127.0.0.1", 403, []string{"Content-Type", "application/json", "Origin", "http://evil.example", "Authorization", auth}},
		{"text/plain, same origin", "POST", "/api/v1/reload", 415, []string{"Content-Type", "text/plain", "Origin", "http://" + self, "Authorization", auth}},
		{"form, no Origin", "POST", "/api/v1/reload", 415, []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", auth}},
		{"PUT as text/json", "PUT", "/api/v1/policies/all/overrides/127.0.0.1", 415, []string{"Content-Type", "text/json", "Authorization", auth}},
		{"body-less, no Content-Type, from another site (no-cors fetch)", "POST", "/api/v1/reload", 403, []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Authorization", auth}},
		{"body-less, no Content-Type, Origin only (older browser)", "POST", "/api/v1/reload", 403, []string{"Origin", "http://evil.example", "Authorization", auth}},
		{"body-less DELETE from another site", "DELETE", "/api/v1/policies/all/keys/127.0.0.1", 403, []string{"Sec-Fetch-Site", "cross-site", "Authorization", auth}},
		{"a body without a Content-Type", "POST", "/api/v1/reload", 415, []string{"Authorization", auth, "X-Body", "{}"}},
		{"body-less, Content-Length: 0, text/plain", "POST", "/api/v1/reload", 415, []string{"Content-Type", "text/plain", "Authorization", auth}},
	} {
		body := ""
		for i := 0; i+1 < len(c.fields); i += 2 {
			if c.fields[i] == "X-Body" {
				body = c.fields[i+1]
			}
		}
		code, ct, body := adminCall(t, r, c.method, c.path, "", body, c.fields...)
		if code != c.want || ct != "application/problem+json" {
			t.Errorf("%s: %d %s %q, want %d problem+json", c.name, code, ct, body, c.want)
		}
	}
	// A rebinding page (its name now resolving to the admin listener)
	// sending the bare command: refused by its Host.
	if code, _, body := adminCall(t, r, "POST", "/api/v1/reload", "rebound.example", "", "Authorization", auth); code != 421 {
		t.Errorf("body-less POST with Host rebound.example: %d %s, want 421", code, body)
	}
	if now := reloadsCounted(t, r); now != reloads {
		t.Errorf("a refused request reloaded: %s, was %s", now, reloads)
	}
	// The preflight a cross-origin JSON POST needs is granted nothing.
	req, _ := http.NewRequest("OPTIONS", r.admin+"/api/v1/reload", nil)
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "content-type, authorization")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for name := range resp.Header {
		if strings.HasPrefix(name, "Access-Control-") {
			t.Errorf("preflight answered %s: %s", name, resp.Header.Get(name))
		}
	}
	if resp.StatusCode < 400 {
		t.Errorf("preflight: %d, want a refusal", resp.StatusCode)
	}
	// Same-origin JSON with the token, as the dashboard's page or curl
	// sends it: applied. Without the token: 401.
	if code, _, body := adminCall(t, r, "POST", "/api/v1/reload", "", "", "Content-Type", "application/json; charset=utf-8",
		"Origin", "http://"+self, "Sec-Fetch-Site", "same-origin"); code != 401 {
		t.Errorf("without the token: %d %s, want 401", code, body)
	}
	for _, fields := range [][]string{
		{"Content-Type", "application/json; charset=utf-8", "Origin", "http://" + self, "Sec-Fetch-Site", "same-origin", "Authorization", auth},
		{"Content-Type", "application/json", "Authorization", auth},
		{"Content-Type", "application/json", "Sec-Fetch-Site", "none", "Authorization", auth},
	} {
		if code, _, body := adminCall(t, r, "POST", "/api/v1/reload", "", "", fields...); code != 200 || !strings.Contains(body, `"applied": true`) {
			t.Errorf("%q: %d %s, want 200 applied", fields, code, body)
		}
	}
	// The bare commands an operator types: no body, no Content-Type.
	if code, _, body := adminCall(t, r, "POST", "/api/v1/reload", "", "", "Authorization", auth); code != 200 || !strings.Contains(body, `"applied": true`) {
		t.Errorf("curl -X POST: %d %s, want 200 applied", code, body)
	}
	if code, _, body := adminCall(t, r, "DELETE", "/api/v1/policies/all/keys/127.0.0.1", "", "", "Authorization", auth); code != 204 {
		t.Errorf("curl -X DELETE: %d %s, want 204", code, body)
	}
	if now := reloadsCounted(t, r); !strings.Contains(now, `{result="success"} 4`) {
		t.Errorf("reloads: %s, want 4 successes", now)
	}
}

// TestAdminAllowedHosts: the admin listener answers to any IP address (a
// loopback one, its own, any other: no name was resolved), to localhost,
// and to the names of [admin] allowed_hosts, with the port when one is
// listed; any other name gets 421.
func TestAdminAllowedHosts(t *testing.T) {
	r := startFile(t, func(path, up string) {
		text := configText(up, 2, "1/h", "")
		text = strings.Replace(text, "[admin]\n", "[admin]\nallowed_hosts = [\"Ops.Internal\", \"admin.internal:1\"]\n", 1)
		os.WriteFile(path, []byte(text), 0o644)
	})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(r.admin, "http://"))
	for host, want := range map[string]int{
		"127.0.0.1": 200, "127.0.0.1:" + port: 200, "127.9.9.9:" + port: 200, "[::1]": 200, "[::1]:" + port: 200,
		"localhost": 200, "localhost:" + port: 200, "LOCALHOST.:" + port: 200, "10.1.2.3:" + port: 200,
		"ops.internal": 200, "ops.internal:" + port: 200, "OPS.internal.:" + port: 200, "admin.internal:1": 200,
		"admin.internal:" + port: 421, "admin.internal": 421, "internal": 421, "localhost.example": 421,
		"evil.ops.internal": 421, "ops.internal.evil.example": 421, "127.0.0.1.example:" + port: 421,
	} {
		if code, _, body := adminCall(t, r, "GET", "/api/v1/config", host, ""); code != want {
			t.Errorf("Host %s: %d %.80q, want %d", host, code, body, want)
		}
	}
	// A name in listen is one too, with its port.
	g := newAdminGuard("Admin.Example:9091", nil)
	for host, want := range map[string]bool{"admin.example:9091": true, "admin.example:9092": false, "admin.example": false, "": true} {
		if got := g.allowedHost(host); got != want {
			t.Errorf("listen admin.example:9091: Host %q allowed %v, want %v", host, got, want)
		}
	}
}

// TestAdminTimeouts, raw sockets: a client that sends a request head and
// part of its body, or that holds a keep-alive connection idle, or that
// sends half a head, is cut off by the admin listener's timeout for it,
// not before, give or take a loaded machine's scheduling. The server
// starts with its documented timeouts (5 s for a head, 10 s for a whole
// request, 30 s idle), which the test checks and then lowers to 1, 2 and
// 3 s: distinct, so that a timeout applied to the wrong case shows, and
// short, so that its three cases wait in parallel for about 3 s.
func TestAdminTimeouts(t *testing.T) {
	t.Parallel()
	lowered := adminTimeouts{readHeader: time.Second, read: 2 * time.Second, write: 30 * time.Second, idle: 3 * time.Second}
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(configText(up, 2, "1/h", "")), 0o644) },
		func(p *process) {
			if want := (adminTimeouts{5 * time.Second, 10 * time.Second, 30 * time.Second, 30 * time.Second}); p.adminTimeouts != want {
				t.Errorf("a process starts with the admin timeouts %+v, want the documented %+v", p.adminTimeouts, want)
			}
			p.adminTimeouts = lowered
		})
	addr := strings.TrimPrefix(r.admin, "http://")
	// cutAfter sends what, then reads (answering any request written in
	// full) until the server closes the connection, at most within
	// limit; it returns how long that took from the first byte sent.
	cutAfter := func(t *testing.T, what string, limit time.Duration) time.Duration {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		if _, err := io.WriteString(conn, what); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(start.Add(limit))
		_, err = io.Copy(io.Discard, bufio.NewReader(conn))
		took := time.Since(start)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("still open after %v", took)
		}
		return took
	}
	for _, c := range []struct {
		name, send string
		bound      time.Duration
	}{
		{"half a body", "PUT /api/v1/policies/all/overrides/127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"scale\": ", lowered.read},
		{"idle keep-alive", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", lowered.idle},
		{"half a head", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", lowered.readHeader},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			took := cutAfter(t, c.send, c.bound+15*time.Second)
			t.Logf("cut after %v (bound %v)", took.Round(time.Millisecond), c.bound)
			if took < c.bound-250*time.Millisecond {
				t.Errorf("cut after %v, before the bound %v", took, c.bound)
			}
		})
	}
}
