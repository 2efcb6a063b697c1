package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// readingsConfig limits /login exactly, everything under /api/, and
// /Docs/ (a prefix in upper case) apart from a catch-all keyed by path.
const readingsConfig = `
[server]
CASE
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "login"
upstream = "up"
match = { path = "/login" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1
  window = "1h"

[[policy]]
name = "api"
upstream = "up"
match = { path_prefix = "/api/" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1
  window = "1h"

[[policy]]
name = "all"
upstream = "up"
key = ["path"]
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1000
  window = "1h"
`

// matchTarget runs match and buildKeys on a request whose target is
// target (as sent on the request line, or behind forward auth when
// verbatim), and returns the policy it was matched to ("" when refused),
// its path key, and the refusal's detail.
func matchTarget(t *testing.T, caseSensitive bool, target string, verbatim bool) (name, key, detail string) {
	t.Helper()
	text := strings.Replace(readingsConfig, "CASE", "", 1)
	if caseSensitive {
		text = strings.Replace(readingsConfig, "CASE", "case_sensitive_paths = true", 1)
	}
	cfg, err := config.Parse("readings.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	h := New(set, Options{})
	r, err := http.NewRequest("GET", "http://a"+target, nil)
	if err != nil {
		// A target Go's URL parser refuses whole: build it by hand.
		r, _ = http.NewRequest("GET", "http://a/", nil)
		r.URL.Path = target
	}
	r.RequestURI = target
	x := testExchange(h, httptest.NewRecorder(), r, nil)
	o := ruling{keys: make([]string, 4), verbatim: verbatim}
	if !h.match(x, &o) {
		return "", "", o.detail
	}
	h.buildKeys(x, &o)
	parts, _ := KeyParts(o.key)
	if len(parts) == 1 {
		key = parts[0]
	}
	return o.p.Name, key, ""
}

// TestPathReadings: a path that some common upstream routes to another
// policy's handler than limitproxy's canonical form selects is refused,
// on both faces; one that every reading leaves under the same policy is
// decided there, keyed by its fullest reading.
func TestPathReadings(t *testing.T) {
	for _, tc := range []struct {
		target string
		// want is the policy on the proxy face and behind forward auth
		// ("": refused); faRefused refuses it behind forward auth.
		want      string
		faRefused bool
		key       string // the catch-all's path key, if decided there
	}{
		{target: "/login", want: "login"},
		{target: "/api/x", want: "api"},
		{target: "/other", want: "all", key: "/other"},
		{target: "/%6cogin", want: "login"},
		// A fragment: Go keeps it in the path, Werkzeug and Node drop it.
		{target: "/login#x", want: ""},
		{target: "/other#x", want: ""},
		{target: "/other?a#b", want: ""},
		// A backslash: IIS and WHATWG URL read it as a slash.
		{target: `/api\b`, want: ""},
		{target: "/api%5Cb", want: ""},
		{target: "/api%5cb", want: ""},
		{target: `/doc\x`, want: "all", key: "/doc/x"},
		// ;parameters: servlet containers drop them.
		{target: "/login;jsessionid=1", want: ""},
		{target: "/api;x/y", want: ""},
		{target: "/x/..;/login", want: ""},
		{target: "/api/..;/other", want: ""},
		{target: "/other;v=1", want: "all", key: "/other"},
		{target: "/login%3Bx", want: "all", key: "/login;x"},
		// Trailing dots and spaces: IIS drops them.
		{target: "/login.", want: ""},
		{target: "/login%2e", want: ""},
		{target: "/login%20", want: ""},
		{target: "/login.%20.", want: ""},
		{target: "/a.b", want: "all", key: "/a.b"},
		{target: "/other.", want: "all", key: "/other"},
		// Case: Express, ASP.NET Core and IIS ignore it.
		{target: "/LOGIN", want: ""},
		{target: "/Api/x", want: ""},
		{target: "/api/X", want: "api"},
		{target: "/Other", want: "all", key: "/other"},
		{target: "/%C3%89t%C3%A9", want: "all", key: "/été"},
		// A trailing slash: Express and ASP.NET Core ignore it, but it
		// counts only against a policy that names the path exactly.
		{target: "/login/", want: ""},
		{target: "/api/", want: "api"},
		{target: "/other/", want: "all", key: "/other"},
		// Overlong UTF-8: a slash or a dot to a lax decoder.
		{target: "/%C0%AFlogin", want: ""},
		{target: "/api/%C0%AE%C0%AE/login", want: ""},
		{target: "/%E0%80%AFlogin", want: ""},
		// Dot segments: resolved in the canonical form the proxy
		// forwards; behind forward auth, Werkzeug and Express route them
		// as sent (/api/x/../../y is under their /api/).
		{target: "/api/x/../../login", want: "login", faRefused: true},
		{target: "/api/x/../../other", want: "all", faRefused: true, key: "/other"},
		{target: "/api/%2e%2e/other", want: "all", faRefused: true, key: "/other"},
		{target: "/./login", want: "login", faRefused: true},
		{target: "/a/../other", want: "all", key: "/other"},
		// Empty segments: merged in the canonical form; behind forward
		// auth, Express routes //api/x as sent (outside /api/), and
		// WHATWG URL against a base (Node's new URL(req.url, base))
		// reads a leading //x as a host and keeps empty segments.
		{target: "/api//x", want: "api"},
		{target: "//api/x", want: "api", faRefused: true},
		{target: "//x/login", want: "all", faRefused: true, key: "/x/login"},
		{target: "/login//..", want: "all", faRefused: true, key: "/"},
		{target: "//x/other", want: "all", key: "/x/other"},
	} {
		for _, verbatim := range []bool{false, true} {
			want := tc.want
			if verbatim && tc.faRefused {
				want = ""
			}
			name, key, detail := matchTarget(t, false, tc.target, verbatim)
			if name != want {
				t.Errorf("%q (forward auth %v): policy %q (%s), want %q", tc.target, verbatim, name, detail, want)
				continue
			}
			if name == "" && detail == "" {
				t.Errorf("%q (forward auth %v): refused without a detail", tc.target, verbatim)
			}
			if name == "all" && key != tc.key {
				t.Errorf("%q (forward auth %v): key %q, want %q", tc.target, verbatim, key, tc.key)
			}
		}
	}
}

// TestPathReadingsCaseSensitive: with case_sensitive_paths, a path in
// another case is its own, as the canonical form has it.
func TestPathReadingsCaseSensitive(t *testing.T) {
	for target, want := range map[string]string{
		"/LOGIN": "all", "/Api/x": "all", "/login": "login", "/login.": "",
	} {
		if name, _, detail := matchTarget(t, true, target, false); name != want {
			t.Errorf("%q: policy %q (%s), want %q", target, name, detail, want)
		}
	}
	if _, key, _ := matchTarget(t, true, "/Other", false); key != "/Other" {
		t.Errorf("/Other keyed %q, want /Other", key)
	}
}

// TestRulesCommonPathHasNone: the usual path has no reading to check, so
// that it costs one pass over its bytes.
func TestRulesCommonPathHasNone(t *testing.T) {
	for _, p := range []string{"/", "/api/v1/users/123", "/a-b_c/d.json", "/x/y.z/w"} {
		if rs := rules(p, p, true, false); rs != 0 {
			t.Errorf("%q: rules %b, want none", p, rs)
		}
	}
}

// casedConfig names a gRPC service, whose method paths are in mixed case,
// before a catch-all.
const casedConfig = `
[server]
CASE
[[upstream]]
name = "up"
targets = ["http://127.0.0.1:1"]

[[policy]]
name = "health"
upstream = "up"
match = { path_prefix = "/grpc.health.v1.Health/" }
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1
  window = "1h"

[[policy]]
name = "all"
upstream = "up"
  [[policy.limits]]
  algorithm = "sliding_log"
  limit = 1000
  window = "1h"
`

// TestPathReadingsCasedPolicy: a policy written in mixed case (a gRPC
// service) keeps its own paths, and a spelling of them in another case,
// which an upstream that ignores case would route to it, is refused even
// in lower case; with case_sensitive_paths it is the catch-all's.
func TestPathReadingsCasedPolicy(t *testing.T) {
	for _, caseSensitive := range []bool{false, true} {
		text := strings.Replace(casedConfig, "CASE", "", 1)
		if caseSensitive {
			text = strings.Replace(casedConfig, "CASE", "case_sensitive_paths = true", 1)
		}
		for target, want := range map[string]string{
			"/grpc.health.v1.Health/Check": "health",
			"/grpc.health.v1.health/check": "",
			"/GRPC.HEALTH.V1.HEALTH/Watch": "",
			"/other":                       "all",
			"/Other":                       "all",
		} {
			if caseSensitive && want == "" {
				want = "all"
			}
			cfg, err := config.Parse("cased.toml", []byte(text))
			if err != nil {
				t.Fatal(err)
			}
			set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			h := New(set, Options{})
			r, _ := http.NewRequest("POST", "http://a"+target, nil)
			r.RequestURI = target
			o := ruling{keys: make([]string, 4)}
			name := ""
			if h.match(testExchange(h, httptest.NewRecorder(), r, nil), &o) {
				name = o.p.Name
			}
			if name != want {
				t.Errorf("case_sensitive_paths = %v: %s: policy %q (%s), want %q", caseSensitive, target, name, o.detail, want)
			}
		}
	}
}
