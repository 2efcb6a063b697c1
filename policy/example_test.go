package policy_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
)

// A configuration of two policies compiled against a memory store: Match
// tries them in file order and returns the first whose match table holds,
// or none; the policy's Limiter then decides the request's client (by its
// key: here an address), at exact instants. The fixed window of a minute
// starts on the minute, so the third login waits for 12:01.
func ExampleSet_Match() {
	const src = `
[[upstream]]
name = "app"
targets = ["http://127.0.0.1:8000"]

[[policy]]
name = "login"
upstream = "app"
match = { methods = ["POST"], path = "/login" }
  [[policy.limits]]
  algorithm = "fixed_window"
  limit = 2
  window = "1m"

[[policy]]
name = "api"
upstream = "app"
match = { path_prefix = "/api/" }
  [[policy.limits]]
  algorithm = "token_bucket"
  rate = "10/s"
`
	cfg, err := config.Parse("example.toml", []byte(src))
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // any instant: the example passes the time in
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), t0)
	if err != nil {
		panic(err)
	}
	for _, r := range []struct{ method, target string }{
		{"POST", "/login"}, {"GET", "/login"}, {"GET", "/api/items"}, {"GET", "/"},
	} {
		if p, ok := set.Match(httptest.NewRequest(r.method, "http://example.com"+r.target, nil)); ok {
			fmt.Printf("%s %s: policy %q\n", r.method, r.target, p.Name)
		} else {
			fmt.Printf("%s %s: no policy\n", r.method, r.target)
		}
	}

	login, _ := set.Match(httptest.NewRequest("POST", "http://example.com/login", nil))
	for _, at := range []time.Duration{0, time.Second, 2 * time.Second, time.Minute} {
		d, err := login.Limiter.Allow(context.Background(), "203.0.113.7", t0.Add(at), 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("login at t+%v: allowed=%v remaining=%d retry_after=%v\n", at, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// POST /login: policy "login"
	// GET /login: no policy
	// GET /api/items: policy "api"
	// GET /: no policy
	// login at t+0s: allowed=true remaining=1 retry_after=0s
	// login at t+1s: allowed=true remaining=0 retry_after=0s
	// login at t+2s: allowed=false remaining=0 retry_after=58s
	// login at t+1m0s: allowed=true remaining=1 retry_after=0s
}
