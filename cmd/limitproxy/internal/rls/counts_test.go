package rls

import (
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// countPolicies are RLS policies as limitproxy import writes them: keys
// one and two deep, a share_threshold wildcard with its literal copy
// ahead of the wildcards, and a limit of the
// reference's largest requests_per_unit.
const countPolicies = `
[[policy]]
name = "c.a"
[policy.match]
rls_domain = "c"
descriptor = ["a"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 10
window = "1m"

[[policy]]
name = "c.a.b"
[policy.match]
rls_domain = "c"
descriptor = ["a", "b"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 10
window = "1m"

[[policy]]
name = "c.w_x-.literal"
key = []
[policy.match]
rls_domain = "c"
descriptor = ["w=x\\*"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 3
window = "1m"

[[policy]]
name = "c.w_-"
[policy.match]
rls_domain = "c"
descriptor = ["w=*y*"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 10
window = "1m"

[[policy]]
name = "c.w_x-"
key = []
[policy.match]
rls_domain = "c"
descriptor = ["w=x*"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 3
window = "1m"

[[policy]]
name = "c.big"
[policy.match]
rls_domain = "c"
descriptor = ["big"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 4294967295
window = "1h"
`

// TestCountKeys: with compatibility a descriptor's count is named by
// its domain, keys and values, not by the policy that finds it. With
// count_keys = "joined", as the reference names its Redis key (joined
// with '_'), a=x_b_y and (a=x, b=y) are one count, though two policies
// find them; with "distinct" (the default) they are two.
func TestCountKeys(t *testing.T) {
	for _, tc := range []struct {
		keys   string
		second uint32 // limit_remaining of the second descriptor
	}{{`count_keys = "joined"`, 8}, {`count_keys = "distinct"`, 9}, {"", 9}} {
		rt := newRLSTWith(t, compat+tc.keys+"\n", countPolicies)
		rt.expect(tc.keys+": a=x_b_y", rt.call("c", dsc("a=x_b_y")), ok, rt.limited(ok, "", 10, minute, 9))
		rt.expect(tc.keys+": a=x,b=y", rt.call("c", dsc("a=x,b=y")), ok, rt.limited(ok, "", 10, minute, tc.second))
		rt.expect(tc.keys+": a=x,b=z", rt.call("c", dsc("a=x,b=z")), ok, rt.limited(ok, "", 10, minute, 9))
	}
	if _, err := config.Parse("c.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\ncount_keys = \"joined\"\n"+countPolicies)); err == nil {
		t.Error(`count_keys = "joined" without compatibility accepted`)
	}
}

// TestShareThresholdLiteral: a value equal to a share_threshold wildcard
// as written ("x*") finds its literal copy, ahead of the wildcards; the
// copy counts with the wildcard, under the pattern, as the reference
// counts the two under one key. Without compatibility each policy counts
// its own.
func TestShareThresholdLiteral(t *testing.T) {
	rt := newRLSTWith(t, compat, countPolicies)
	rt.expect("x* (the literal copy)", rt.call("c", dsc("w=x*")), ok, rt.limited(ok, "", 3, minute, 2))
	rt.expect("xa (the wildcard x*)", rt.call("c", dsc("w=xa")), ok, rt.limited(ok, "", 3, minute, 1))
	rt.expect("xya (the wildcard *y*, ahead)", rt.call("c", dsc("w=xya")), ok, rt.limited(ok, "", 10, minute, 9))
	rt.expect("xb (x*)", rt.call("c", dsc("w=xb")), ok, rt.limited(ok, "", 3, minute, 0))
	rt.expect("x* again: over", rt.call("c", dsc("w=x*")), over, rt.limited(over, "", 3, minute, 0))
	rt.expect("za (no wildcard): OK without a limit", rt.call("c", dsc("w=za")), ok, bare())
	rt = newRLSTWith(t, "", countPolicies)
	for _, v := range []string{"x*", "xa"} {
		if r := rt.call("c", dsc("w="+v)); r.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("without compatibility, %s: %v", v, r)
		}
	}
}

// TestLargestLimit: a limit of 4294967295 (the reference's largest
// requests_per_unit) is counted past 1,000,000,000 and compared as the
// reference does; so is a descriptor's own limit of it.
func TestLargestLimit(t *testing.T) {
	rt := newRLSTWith(t, compat+"max_hits_addend = 1000000000\n", countPolicies)
	for i, rem := range []uint32{3294967295, 2294967295, 1294967295, 294967295} {
		if r := rt.call("c", dsc("big=x", hits(1e9))); r.OverallCode != ok || r.Statuses[0].LimitRemaining != rem || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != math.MaxUint32 {
			t.Fatalf("call %d: %v", i+1, r)
		}
	}
	rt.expect("294967295 more: at the limit", rt.call("c", dsc("big=x", hits(294967295))), ok, rt.limited(ok, "", math.MaxUint32, hour, 0))
	rt.expect("1 more: over", rt.call("c", dsc("big=x", hits(1))), over, rt.limited(over, "", math.MaxUint32, hour, 0))
	rt.expect("1e9 more: over", rt.call("c", dsc("big=x", hits(1e9))), over, rt.limited(over, "", math.MaxUint32, hour, 0))
	rt.expect("0: over", rt.call("c", dsc("big=x", hits(0))), over, rt.limited(over, "", math.MaxUint32, hour, 0))
	rt.expect("own 4294967295 a minute", rt.call("c", dsc("own=x", hits(1e9), own(math.MaxUint32, typev3.RateLimitUnit_MINUTE))), ok, rt.limited(ok, "", math.MaxUint32, minute, 3294967295))
	// Without compatibility the limit is the fixed window's own.
	rt = newRLSTWith(t, "max_hits_addend = 1000000000\n", countPolicies)
	for i := range 4 {
		if r := rt.call("c", dsc("big=x", hits(1e9))); r.OverallCode != ok {
			t.Fatalf("own counting, call %d: %v", i+1, r)
		}
	}
	if r := rt.call("c", dsc("big=x", hits(1e9))); r.OverallCode != over {
		t.Fatalf("own counting, 5e9: %v", r)
	}
	if r := rt.call("c", dsc("big=x", hits(294967295))); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("own counting, to the limit: %v", r)
	}
}

// TestCountsNamedByWindowStart: with the store's counters, a count is
// named by its window's start, as the reference names its Redis key, and
// each addition sets its expiry to its own window's length, as the
// reference's EXPIRE after each INCRBY does: at the first second of a
// minute, a descriptor's own limit per second counts with its rule's
// minute, and ends that count a second later.
func TestCountsNamedByWindowStart(t *testing.T) {
	rt := newRLST(t, compat)
	rt.now = time.Unix(1_800_000_000-1_800_000_000%3600+3600*5, 250_000_000) // an hour's, a minute's, a second's start
	rt.expect("the rule, per minute", rt.call("d", dsc("user=u")), ok, rt.limited(ok, "", 3, minute, 2))
	rt.expect("its own limit, per second: the same count", rt.call("d", dsc("user=u", own(5, typev3.RateLimitUnit_SECOND))), ok, rt.limited(ok, "", 5, second, 3))
	rt.expect("its own limit, per hour: the same count", rt.call("d", dsc("user=u", own(5, typev3.RateLimitUnit_HOUR))), ok, rt.limited(ok, "", 5, hour, 2))
	rt.expect("the rule, 4 of 3", rt.call("d", dsc("user=u")), over, rt.limited(over, "", 3, minute, 0))
	rt.expect("per second, 5 of 5", rt.call("d", dsc("user=u", own(5, typev3.RateLimitUnit_SECOND))), ok, rt.limited(ok, "", 5, second, 0))
	// The last addition (per second) set the count's expiry to a second.
	rt.now = rt.now.Add(2 * time.Second)
	if redisAddr(t) != "" {
		time.Sleep(1100 * time.Millisecond) // Redis's own clock expires it
	}
	rt.expect("the rule, two seconds on: its count ended with the second's", rt.call("d", dsc("user=u")), ok, rt.limited(ok, "", 3, minute, 2))
	rt.expect("per hour: so did the hour's", rt.call("d", dsc("user=u", own(5, typev3.RateLimitUnit_HOUR))), ok, rt.limited(ok, "", 5, hour, 3))
	rt.expect("per second: another second's count", rt.call("d", dsc("user=u", own(5, typev3.RateLimitUnit_SECOND))), ok, rt.limited(ok, "", 5, second, 4))
}

// TestCountsRedisDown: with Redis gone, a count named by descriptor is
// decided by on_error, as any limit on the Redis store: "deny" is
// OVER_LIMIT, "allow" OK with the limit full, "local" the memory
// store's count.
func TestCountsRedisDown(t *testing.T) {
	for _, tc := range []struct {
		onError string
		code    rlsv3.RateLimitResponse_Code
		rem     []uint32 // of two calls
	}{{"deny", over, []uint32{0, 0}}, {"allow", ok, []uint32{3, 3}}, {"local", ok, []uint32{2, 1}}} {
		t.Run(tc.onError, func(t *testing.T) {
			srv := redistest.Start(t)
			cfg, err := config.Parse("down.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\n"+compat+"\n"+compatPolicies))
			if err != nil {
				t.Fatal(err)
			}
			c := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{srv.Addr()}, Timeout: 100 * time.Millisecond})
			defer c.Close()
			store, err := redisstore.New(c, redisstore.Options{Timeout: 100 * time.Millisecond, OnError: tc.onError, Fallback: memstore.New(memstore.Options{})})
			if err != nil {
				t.Fatal(err)
			}
			set, err := policy.Compile(cfg, store, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			rt := &rlsT{t: t, now: time.Now()}
			rt.s = &service{h: proxy.New(set, proxy.Options{Now: func() time.Time { return rt.now }}), cfg: cfg.RLS, log: zap.NewNop()}
			srv.Kill()
			for i, rem := range tc.rem {
				r := rt.call("d", dsc("user=u"))
				if r.OverallCode != tc.code || r.Statuses[0].LimitRemaining != rem || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
					t.Fatalf("on_error %s, call %d: %v", tc.onError, i+1, r)
				}
			}
		})
	}
}

// TestExpirationJitter: with expiration_jitter_max, each addition to a
// count named by descriptor sets its expiry to its unit and the random
// source's seconds from [0, max), as the reference's
// EXPIRATION_JITTER_MAX_SECONDS: TestCountsNamedByWindowStart's count,
// last added to per second, outlives its second by the jitter (2 s of
// at most 3); without it, it ends with the second. Memory store (the
// Redis store is given the same expiry).
func TestExpirationJitter(t *testing.T) {
	for _, tc := range []struct {
		jitter string
		rem    uint32 // the rule's, two seconds on: 3 of 3 while the count lasts
		code   rlsv3.RateLimitResponse_Code
	}{{`expiration_jitter_max = "3s"`, 0, ok}, {"", 2, ok}} {
		cfg, err := config.Parse("j.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\n"+compat+tc.jitter+"\n"+compatPolicies))
		if err != nil {
			t.Fatal(err)
		}
		set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var asked []int64
		rt := &rlsT{t: t, now: time.Unix(1_800_000_000-1_800_000_000%3600+3600*5, 250_000_000)}
		rt.s = &service{h: proxy.New(set, proxy.Options{Now: func() time.Time { return rt.now }, Jitter: func(n int64) int64 {
			asked = append(asked, n)
			return n - 1
		}}), cfg: cfg.RLS, log: zap.NewNop()}
		rt.expect(tc.jitter+": the rule, per minute", rt.call("d", dsc("user=u")), ok, rt.limited(ok, "", 3, minute, 2))
		rt.expect(tc.jitter+": per second, the same count", rt.call("d", dsc("user=u", own(5, typev3.RateLimitUnit_SECOND))), ok, rt.limited(ok, "", 5, second, 3))
		rt.now = rt.now.Add(2 * time.Second)
		rt.expect(tc.jitter+": the rule, two seconds on", rt.call("d", dsc("user=u")), tc.code, rt.limited(tc.code, "", 3, minute, tc.rem))
		if tc.jitter != "" && (len(asked) != 3 || asked[0] != 3) {
			t.Errorf("the random source was asked %v, want [3 3 3]", asked)
		}
		if tc.jitter == "" && len(asked) != 0 {
			t.Errorf("without jitter, the random source was asked %v", asked)
		}
	}
	if _, err := config.Parse("j.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\nexpiration_jitter_max = \"3s\"\n")); err == nil {
		t.Error("expiration_jitter_max without compatibility accepted")
	}
	if _, err := config.Parse("j.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\n"+compat+"expiration_jitter_max = \"1500ms\"\n")); err == nil {
		t.Error("expiration_jitter_max of 1.5 s accepted")
	}
}
