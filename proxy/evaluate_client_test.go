package proxy

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// TestEvaluateClientAsLogged: a replayed request's RemoteAddr is the
// client the proxy keyed it by; forwarding headers the log recorded (for a
// policy that matches on one) are not walked again, even when that client
// is a trusted proxy (a balancer's PROXY LOCAL connection, or a chain of
// trusted hops only), so that replay keys it as it was keyed live.
func TestEvaluateClientAsLogged(t *testing.T) {
	cfg, err := config.Parse("eval.toml", []byte(`[server]
trusted_proxies = ["127.0.0.0/8"]
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:1"]
[[policy]]
name = "fw"
upstream = "app"
key = ["ip"]
  [policy.match]
  headers = { "X-Forwarded-For" = "*" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "1/h"
  burst = 1
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{MaxKeys: 100, VirtualQueues: true}), now)
	if err != nil {
		t.Fatal(err)
	}
	e := NewEvaluator(set, EvaluatorOptions{})
	for i, want := range []Decision{Allowed, Rejected, Rejected} {
		r := &http.Request{Method: "GET", Host: "h", URL: &url.URL{Path: "/"}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			RemoteAddr: "127.0.0.2:0", Header: http.Header{"X-Forwarded-For": {"203.0.113." + string(rune('1'+i))}}}
		if v := e.Evaluate(r, now); v.Decision != want {
			t.Errorf("request %d: %s (key %q), want %s", i+1, v.Decision, v.Key, want)
		}
	}
}
