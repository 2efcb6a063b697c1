package proxy

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// hashedReplayConfig reads headers every way a policy can: keyed only
// (X-Api-Key), matched by presence and keyed (X-Account), matched by value
// and keyed (X-Plan), an estimate (X-Max-Tokens), cookies and a query
// parameter keyed.
const hashedReplayConfig = `
[admin]
key_hash_secret_env = "UNUSED_HERE"
[log]
access_replay = "hashed"
[[upstream]]
name = "up"
targets = ["http://upstream.invalid"]
[[policy]]
name = "plan"
upstream = "up"
key = ["header:X-Plan", "header:X-Account"]
match = { path = "/plan", headers = { "X-Plan" = "gold", "X-Account" = "*" } }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 100
  window = "1h"
  cost_from = "header:X-Tokens"
  estimate_from = "header:X-Max-Tokens"
[[policy]]
name = "keys"
upstream = "up"
key = ["header:X-Api-Key", "cookie:sid", "query:token"]
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 100
  window = "1h"
`

// TestReplayPlanHashed: with access_replay = "hashed", a header matched
// by value or giving an estimate is logged as it is; one only keyed, or
// matched by presence, as the hash of what its key part reads; the
// Cookie header and the query only as the keyed cookies and parameters,
// hashed. Nothing else a client sent is logged.
func TestReplayPlanHashed(t *testing.T) {
	cfg, err := config.Parse("replay.toml", []byte(hashedReplayConfig))
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		t.Fatal(err)
	}
	pl := newReplayPlan(set, config.ReplayHashed)
	if want := []string{"X-Max-Tokens", "X-Plan"}; !slices.Equal(pl.headers, want) {
		t.Errorf("logged as they are: %q, want %q", pl.headers, want)
	}
	if want := []string{"X-Account", "X-Api-Key"}; !slices.Equal(pl.keyed, want) {
		t.Errorf("logged hashed: %q, want %q", pl.keyed, want)
	}
	if !pl.cookie || !slices.Equal(pl.cookies, []string{"sid"}) || !slices.Equal(pl.queries, []string{"token"}) {
		t.Errorf("cookies %v %q, queries %q; want sid and token", pl.cookie, pl.cookies, pl.queries)
	}

	core, logs := observer.New(zapcore.InfoLevel)
	hasher := NewKeyHasher([]byte("a-secret-of-16-bytes"))
	h := New(set, Options{AccessLog: true, AccessLogger: zap.New(core), KeyHasher: hasher, Now: newClock().now})
	r := httptest.NewRequest("GET", "/other?page=2&token=tok-secret&password=pw-secret", nil)
	r.Header.Set("X-Api-Key", "sk-secret, second")
	r.Header.Set("X-Plan", "silver")
	r.Header.Set("Cookie", "csrf=csrf-secret; sid=sid-secret")
	r.Header.Set("Authorization", "Bearer bearer-secret")
	h.ServeHTTP(httptest.NewRecorder(), r)
	lines := logs.FilterMessage("request").All()
	if len(lines) != 1 {
		t.Fatalf("%d access lines, want 1", len(lines))
	}
	m := lines[0].ContextMap()
	for field, want := range map[string]any{
		"target":         "/other?token=" + hasher.Value("tok-secret"),
		"h#:X-Api-Key":   hasher.Value("sk-secret"),
		"h#:Cookie":      "sid=" + hasher.Value("sid-secret"),
		"h:X-Plan":       "silver",
		"h#:X-Account":   nil,
		"h:X-Max-Tokens": nil,
	} {
		if got, ok := m[field]; want == nil && ok || want != nil && got != want {
			t.Errorf("%s = %v, want %v", field, got, want)
		}
	}
	for k, v := range m {
		if s, ok := v.(string); ok && strings.Contains(s, "secret") {
			t.Errorf("%s = %q holds a secret", k, s)
		}
	}
}
