package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// rawAnswer is what the admin listener answered one raw request.
type rawAnswer struct {
	status                       int
	location, allow, contentType string
	body                         string
}

// rawAdmin sends one request to addr exactly as written (method, request
// target, body and header fields name, value, …), over a socket of its own so
// that no client cleans or escapes the target, and reads the answer.
func rawAdmin(t *testing.T, addr, method, target, body string, fields ...string) rawAnswer {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method, target)
	for i := 0; i+1 < len(fields); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", fields[i], fields[i+1])
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, "/", nil)
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return rawAnswer{resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Allow"), resp.Header.Get("Content-Type"), string(got)}
}

// routesConfig is a server whose policy "all" counts per address and
// "hdr" per X-API-Key (a raw key that may hold "/" or "%"), burst 1 and
// a ban of an hour.
func routesConfig(up, extra string) string {
	hdr := `[[policy]]
name = "hdr"
upstream = "app"
key = ["header:X-API-Key"]
match = { path_prefix = "/h/" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 1
  [policy.ban]
  duration = "1h"

`
	text := configText(up, 2, "1/h", extra) + "  [policy.ban]\n  duration = \"1h\"\n"
	return strings.Replace(text, "[[policy]]\n", hdr+"[[policy]]\n", 1)
}

// routeCase is one raw request to the admin listener and the answer it
// gets today: a body beginning with "~" is a part the body contains, any
// other is the whole body.
type routeCase struct {
	method, target, body string
	want                 rawAnswer
}

// checkRoutes sends each case to the admin listener at addr, as JSON and
// with the header fields given (name, value, …), and reports every answer
// that differs from the one it wants.
func checkRoutes(t *testing.T, addr string, cases []routeCase, fields ...string) {
	t.Helper()
	for _, c := range cases {
		got := rawAdmin(t, addr, c.method, c.target, c.body, append([]string{"Content-Type", "application/json"}, fields...)...)
		w := c.want
		want, part := strings.CutPrefix(w.body, "~")
		if got.status != w.status || got.location != w.location || got.allow != w.allow || got.contentType != w.contentType ||
			!part && got.body != want || part && !strings.Contains(got.body, want) {
			t.Errorf("%s %s %q:\n got %d Location %q Allow %q Content-Type %q %q\nwant %d Location %q Allow %q Content-Type %q %q",
				c.method, c.target, c.body, got.status, got.location, got.allow, got.contentType, got.body,
				w.status, w.location, w.allow, w.contentType, w.body)
		}
	}
}

const (
	notFound   = "404 page not found\n"
	notAllowed = "Method Not Allowed\n"
	textPlain  = "text/plain; charset=utf-8"
	textHTML   = "text/html; charset=utf-8"
	appJSON    = "application/json"
)

// TestAdminRoutes pins how the admin listener answers requests at the
// edges of its routes, over raw sockets: a known path with another method
// is 405 with Allow, a trailing slash or an unknown path 404, a path that
// is not clean a 307 to its clean form, a malformed escape 400. A client
// key in a path is one segment unescaped once: %2F is a "/" of the key and
// %25 a "%", never a separator, so "a%2Fb" names the client "a/b" (whose
// request spent its quota) while "a%252Fb" names "a%2Fb"; an unescaped
// "/" splits the path and matches no route.
func TestAdminRoutes(t *testing.T) {
	r := startFile(t, func(path, up string) { os.WriteFile(path, []byte(withKeySecret(t, routesConfig(up, ""))), 0o644) })
	addr := strings.TrimPrefix(r.admin, "http://")
	proxyGet := func(key string) int {
		req, _ := http.NewRequest("GET", r.proxy+"/h/x", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// "a/b" spends its one request; "b/%c" is rejected, then banned.
	for key, want := range map[string][]int{"a/b": {200}, "b/%c": {200, 429}} {
		for i, w := range want {
			if got := proxyGet(key); got != w {
				t.Fatalf("request %d of %q: %d, want %d", i+1, key, got, w)
			}
		}
	}
	spent, fresh := `~"next_request_allowed": false`, `~"next_request_allowed": true`
	checkRoutes(t, addr, []routeCase{
		{"GET", "/api/v1/config/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"POST", "/api/v1/config", "", rawAnswer{405, "", "GET, HEAD", textPlain, notAllowed}},
		{"OPTIONS", "/api/v1/config", "", rawAnswer{405, "", "GET, HEAD", textPlain, notAllowed}},
		{"HEAD", "/api/v1/config", "", rawAnswer{200, "", "", appJSON, ""}},
		{"GET", "/api/v1//config", "", rawAnswer{307, "/api/v1/config", "", textHTML, "<a href=\"/api/v1/config\">Temporary Redirect</a>.\n\n"}},
		{"GET", "/api/v1/./config", "", rawAnswer{307, "/api/v1/config", "", textHTML, "<a href=\"/api/v1/config\">Temporary Redirect</a>.\n\n"}},
		{"GET", "/api/v1/policies/all/../all/bans", "", rawAnswer{307, "/api/v1/policies/all/bans", "", textHTML, "<a href=\"/api/v1/policies/all/bans\">Temporary Redirect</a>.\n\n"}},
		{"GET", "/api/v1/policies//keys/x", "", rawAnswer{307, "/api/v1/policies/keys/x", "", textHTML, "<a href=\"/api/v1/policies/keys/x\">Temporary Redirect</a>.\n\n"}},
		{"GET", "/api/v1/unknown", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/API/v1/config", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/api", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/%61pi/v1/config", "", rawAnswer{200, "", "", appJSON, `~"file": "` + r.path + `"`}},
		{"POST", "/api/v1/reload/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/api/v1/reload", "", rawAnswer{405, "", "POST", textPlain, notAllowed}},
		{"GET", "/healthz/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"POST", "/healthz", "", rawAnswer{405, "", "GET, HEAD", textPlain, notAllowed}},
		{"GET", "//healthz", "", rawAnswer{307, "/healthz", "", textHTML, "<a href=\"/healthz\">Temporary Redirect</a>.\n\n"}},
		{"GET", "/metrics/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/", "", rawAnswer{302, "/dashboard", "", textHTML, "<a href=\"/dashboard\">Found</a>.\n\n"}},
		{"GET", "/dashboard/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"OPTIONS", "*", "", rawAnswer{200, "", "", "", ""}},

		{"GET", "/api/v1/policies/all/keys/127.0.0.1/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"PUT", "/api/v1/policies/all/keys/1.2.3.4", "", rawAnswer{405, "", "DELETE, GET, HEAD", textPlain, notAllowed}},
		{"GET", "/api/v1/policies/hdr/keys/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/api/v1/policies/hdr/keys/a/b", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/api/v1/policies/hdr/keys/a%2Fb", "", rawAnswer{200, "", "", appJSON, spent}},
		{"GET", "/api/v1/policies/hdr/keys/a%2fb", "", rawAnswer{200, "", "", appJSON, spent}},
		{"GET", "/api/v1/policies/hdr/keys/a%252Fb", "", rawAnswer{200, "", "", appJSON, fresh}},
		{"GET", "/api/v1/policies/hdr/keys/a%2F..%2Fb", "", rawAnswer{200, "", "", appJSON, fresh}},
		{"GET", "/api/v1/policies/hdr/keys/..%2F..", "", rawAnswer{200, "", "", appJSON, fresh}},
		{"GET", "/api/v1/policies/hdr/keys/%zz", "", rawAnswer{400, "", "", textPlain, "400 Bad Request"}},
		{"GET", "/api/v1/policies/hdr%2Fkeys/x", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/api/v1/policies/a%2Fb/bans", "", rawAnswer{404, "", "", appJSON, "{\n  \"error\": \"no policy \\\"a/b\\\"\"\n}\n"}},

		{"DELETE", "/api/v1/policies/all/bans", "", rawAnswer{405, "", "GET, HEAD", textPlain, notAllowed}},
		{"GET", "/api/v1/policies/all/bans/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/api/v1/policies/all/bans/x", "", rawAnswer{405, "", "DELETE", textPlain, notAllowed}},
		{"DELETE", "/api/v1/policies/hdr/bans/b/%25c", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"DELETE", "/api/v1/policies/hdr/bans/b%2F%c", "", rawAnswer{400, "", "", textPlain, "400 Bad Request"}},
		{"DELETE", "/api/v1/policies/hdr/bans/b%2F%25c", "", rawAnswer{204, "", "", "", ""}},
		{"DELETE", "/api/v1/policies/hdr/bans/b%2F%25c", "", rawAnswer{404, "", "", appJSON, "~no ban of that key under policy"}},

		{"GET", "/api/v1/overrides/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/api/v1/policies/hdr/overrides/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"PUT", "/api/v1/policies/hdr/overrides", "", rawAnswer{405, "", "GET, HEAD", textPlain, notAllowed}},
		{"GET", "/api/v1/policies/hdr/overrides/k", "", rawAnswer{405, "", "DELETE, PUT", textPlain, notAllowed}},
		{"GET", "/api/v1/policies/none/top", "", rawAnswer{404, "", "", appJSON, "{\n  \"error\": \"no policy \\\"none\\\"\"\n}\n"}},
		{"POST", "/api/v1/top", "", rawAnswer{405, "", "GET, HEAD", textPlain, notAllowed}},
		{"DELETE", "/api/v1/policies/all/keys/by-hash/0123456789abcdef", "", rawAnswer{405, "", "GET, HEAD", textPlain, notAllowed}},
		{"GET", "/api/v1/policies/all/keys/by-hash/", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/api/v1/policies/all/keys/by-hash/0123456789abcdef", "", rawAnswer{403, "", "", appJSON, "~revealing a client key needs [admin] token_env"}},
	})
	// An override of the client "x/%y": set, listed under its hashed
	// key, removed once.
	hashed := testHasher.Key("4:x/%y;")
	checkRoutes(t, addr, []routeCase{
		{"PUT", "/api/v1/policies/hdr/overrides/x/%25y", `{"scale": 2}`, rawAnswer{404, "", "", textPlain, notFound}},
		{"PUT", "/api/v1/policies/hdr/overrides/x%2F%25y", `{"scale": 2}`, rawAnswer{200, "", "", appJSON, `~"key": "` + hashed + `"`}},
		{"GET", "/api/v1/policies/hdr/overrides", "", rawAnswer{200, "", "", appJSON, `~"key": "` + hashed + `"`}},
		{"DELETE", "/api/v1/policies/hdr/overrides/x%2F%25y", "", rawAnswer{204, "", "", "", ""}},
		{"DELETE", "/api/v1/policies/hdr/overrides/x%2F%25y", "", rawAnswer{404, "", "", appJSON, "~no override of that key under policy"}},
	})
}

// TestAdminRoutesToken pins what the token guards: every path that begins
// with /api/ as the request gives it, before it is cleaned or routed, so
// that an unknown /api/ path, one that is not clean, and a wrong method
// are 401 without the token; a path that only becomes /api/… once cleaned
// is redirected there (where the token is asked for), and one whose
// letters are escaped ("/%61pi/") is /api/ to the guard as to the routes.
func TestAdminRoutesToken(t *testing.T) {
	t.Setenv("LIMITPROXY_TEST_ROUTES_TOKEN", "s3cret")
	r := startFile(t, func(path, up string) {
		text := strings.Replace(routesConfig(up, ""), "[admin]\n", "[admin]\ntoken_env = \"LIMITPROXY_TEST_ROUTES_TOKEN\"\n", 1)
		os.WriteFile(path, []byte(text), 0o644)
	})
	addr := strings.TrimPrefix(r.admin, "http://")
	const unauthorized = "{\n  \"error\": \"a valid bearer token is required\"\n}\n"
	checkRoutes(t, addr, []routeCase{
		{"GET", "/api/v1/config", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"GET", "/api/v1/unknown", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"POST", "/api/v1/config", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"OPTIONS", "/api/v1/config", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"GET", "/api/v1/config/", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"GET", "/api/v1//config", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"GET", "/api/../healthz", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"GET", "/%61pi/v1/config", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"DELETE", "/api/v1/policies/hdr/bans/b%2F%25c", "", rawAnswer{401, "", "", appJSON, unauthorized}},
		{"GET", "//api/v1/config", "", rawAnswer{307, "/api/v1/config", "", textHTML, "<a href=\"/api/v1/config\">Temporary Redirect</a>.\n\n"}},
		{"GET", "/x/../api/v1/config", "", rawAnswer{307, "/api/v1/config", "", textHTML, "<a href=\"/api/v1/config\">Temporary Redirect</a>.\n\n"}},
		{"GET", "/api", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/API/v1/config", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"GET", "/healthz", "", rawAnswer{200, "", "", textPlain, "ok\n"}},
		{"GET", "/metrics/", "", rawAnswer{404, "", "", textPlain, notFound}},
	})
	checkRoutes(t, addr, []routeCase{
		{"GET", "/api/v1/config", "", rawAnswer{200, "", "", appJSON, `~"file": "` + r.path + `"`}},
		{"GET", "/api/v1/unknown", "", rawAnswer{404, "", "", textPlain, notFound}},
		{"POST", "/api/v1/config", "", rawAnswer{405, "", "GET, HEAD", textPlain, notAllowed}},
		{"GET", "/api/v1//config", "", rawAnswer{307, "/api/v1/config", "", textHTML, "<a href=\"/api/v1/config\">Temporary Redirect</a>.\n\n"}},
		{"GET", "/api/v1/policies/hdr/keys/a%2Fb", "", rawAnswer{200, "", "", appJSON, `~"next_request_allowed": true`}},
	}, "Authorization", "Bearer s3cret")
}
