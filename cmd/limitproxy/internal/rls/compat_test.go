package rls

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// The tests of this file pin the answers of the RLS to those of
// envoyproxy/ratelimit, as its code gives them (src/service/ratelimit.go
// shouldRateLimitWorker and constructLimitsToCheck, src/limiter/
// base_limiter.go GetResponseDescriptorStatus, src/redis/
// fixed_cache_impl.go DoLimit, src/utils CalculateReset and
// GetHitsAddends, src/config GetLimit), field by field, with [rls]
// compatibility = "envoyproxy/ratelimit"; and what the same keys do
// without it.

// compatPolicies are RLS policies as limitproxy import writes each kind
// of descriptor of the reference.
const compatPolicies = `
[[policy]]
name = "d.user"
metadata = { team = "a", nested = { x = 1, list = ["p", true] } }
[policy.match]
rls_domain = "d"
descriptor = ["user"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 3
window = "1m"

[[policy]]
name = "d.named"
metadata = { team = "b", nested = { y = 2.5 }, only = "named" }
[policy.match]
rls_domain = "d"
descriptor = ["named"]
[[policy.limits]]
name = "the_name"
algorithm = "fixed_window"
limit = 10
window = "1h"

[[policy]]
name = "d.block"
[policy.match]
rls_domain = "d"
descriptor = ["block"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 0
window = "1s"

[[policy]]
name = "d.free"
unlimited = true
[policy.match]
rls_domain = "d"
descriptor = ["free"]

[[policy]]
name = "d.allowed"
[policy.match]
rls_domain = "d"
descriptor = ["allowed"]

[[policy]]
name = "d.specific"
[policy.match]
rls_domain = "d"
descriptor = ["specific"]
[[policy.limits]]
name = "specific_limit"
algorithm = "fixed_window"
limit = 5
window = "24h"

[[policy]]
name = "d.replacing"
replaces = ["specific_limit"]
[policy.match]
rls_domain = "d"
descriptor = ["replacing"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 10
window = "24h"

[[policy]]
name = "d.quota"
quota_mode = true
[policy.match]
rls_domain = "d"
descriptor = ["quota"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 1
window = "720h"

[[policy]]
name = "d.shadow"
mode = "shadow"
metadata = { shadow = true }
[policy.match]
rls_domain = "d"
descriptor = ["shadow"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 1
window = "168h"

[[policy]]
name = "d.second"
key = ["descriptor:s#2"]
[policy.match]
rls_domain = "d"
descriptor = ["s", "s"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 1
window = "8760h"

[[policy]]
name = "d.twice"
[policy.match]
rls_domain = "d"
descriptor = ["a", "a"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 1
window = "8760h"
`

// rlsT is a service over compatPolicies and the [rls] keys rls, on the
// memory store, with a clock the test sets.
type rlsT struct {
	t   *testing.T
	s   *service
	now time.Time
}

func newRLST(t *testing.T, rls string) *rlsT {
	t.Helper()
	return newRLSTWith(t, rls, compatPolicies)
}

// newRLSTWith is newRLST over policies instead of compatPolicies.
func newRLSTWith(t *testing.T, rls, policies string) *rlsT {
	t.Helper()
	cfg, err := config.Parse("compat.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\n"+rls+"\n"+policies))
	if err != nil {
		t.Fatal(err)
	}
	var store limiter.Store = memstore.New(memstore.Options{})
	if redisAddr(t) != "" {
		c := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
		t.Cleanup(func() { c.Close() })
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if store, err = redisstore.New(c, redisstore.Options{Timeout: 5 * time.Second, CallerTime: true, OnError: "deny"}); err != nil {
			t.Fatal(err)
		}
	}
	set, err := policy.Compile(cfg, store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// 40.25 s past a minute: a minute's window resets in 20 s, as the
	// reference counts it (from the whole second), not 19.75 s.
	rt := &rlsT{t: t, now: time.Unix(1_800_000_000-1_800_000_000%3600+3600*5+60*7+40, 250_000_000)}
	rt.s = &service{h: proxy.New(set, proxy.Options{Now: func() time.Time { return rt.now }}), cfg: cfg.RLS, log: zap.NewNop()}
	return rt
}

// dsc is a descriptor of "key=value" entries, then options: hits(n) and
// own(rpu, unit).
type dscOpt func(*rlscommon.RateLimitDescriptor)

func hits(n uint64) dscOpt {
	return func(d *rlscommon.RateLimitDescriptor) { d.HitsAddend = wrapperspb.UInt64(n) }
}

func own(rpu uint32, unit typev3.RateLimitUnit) dscOpt {
	return func(d *rlscommon.RateLimitDescriptor) {
		d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	}
}

func dsc(spec string, opts ...dscOpt) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for _, e := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

func (rt *rlsT) call(domain string, ds ...*rlscommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	rt.t.Helper()
	resp, err := rt.s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		rt.t.Fatal(err)
	}
	return resp
}

// Status builders, as the reference writes its statuses.
const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// limited is a status with a limit: the reference's
// generateResponseDescriptorStatus with a limit, duration_until_reset
// CalculateReset's (the unit's seconds less now's seconds modulo them).
func (rt *rlsT) limited(code rlsv3.RateLimitResponse_Code, name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	w, _ := UnitWindow(unit)
	sec := int64(w / time.Second)
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: &durationpb.Duration{Seconds: sec - rt.now.Unix()%sec},
	}
}

// bare is a status without a limit: no limit found (or replaced, or an
// unknown domain): OK and nothing else.
func bare() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}
}

// unlimited is an unlimited descriptor's: OK, limit_remaining MaxUint32.
func unlimited() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}
}

// expect checks resp against the overall code and statuses.
func (rt *rlsT) expect(step string, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, sts ...*rlsv3.RateLimitResponse_DescriptorStatus) {
	rt.t.Helper()
	want := &rlsv3.RateLimitResponse{OverallCode: overall, Statuses: sts, ResponseHeadersToAdd: resp.ResponseHeadersToAdd}
	if !proto.Equal(resp, want) {
		rt.t.Errorf("%s:\n got %v\nwant %v", step, resp, want)
	}
}

const compat = `compatibility = "envoyproxy/ratelimit"` + "\nresponse_headers = \"none\"\n"

var (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
	week   = rlsv3.RateLimitResponse_RateLimit_WEEK
	month  = rlsv3.RateLimitResponse_RateLimit_MONTH
	year   = rlsv3.RateLimitResponse_RateLimit_YEAR
)

// TestCompatibleKeyOnlyRule: a key-only rule's answers, call after call:
// current_limit is the rule's (no name, its unit, no multiplier),
// limit_remaining what the count leaves, duration_until_reset from the
// whole second; over, limit_remaining 0; a new window starts afresh. A
// named limit carries its name.
func TestCompatibleKeyOnlyRule(t *testing.T) {
	rt := newRLST(t, compat)
	for i, rem := range []uint32{2, 1, 0} {
		rt.expect(fmt.Sprintf("call %d", i+1), rt.call("d", dsc("user=u")), ok, rt.limited(ok, "", 3, minute, rem))
	}
	rt.expect("call 4", rt.call("d", dsc("user=u")), over, rt.limited(over, "", 3, minute, 0))
	rt.expect("another user", rt.call("d", dsc("user=v")), ok, rt.limited(ok, "", 3, minute, 2))
	rt.now = rt.now.Add(20 * time.Second)
	rt.expect("the next minute", rt.call("d", dsc("user=u")), ok, rt.limited(ok, "", 3, minute, 2))
	rt.expect("a named limit", rt.call("d", dsc("named=x")), ok, rt.limited(ok, "the_name", 10, hour, 9))
	rt.expect("a 30-day window", rt.call("d", dsc("quota=x")), ok, rt.limited(ok, "", 1, month, 0))
	rt.expect("a 7-day window", rt.call("d", dsc("shadow=x")), ok, rt.limited(ok, "", 1, week, 0))
	rt.expect("a 365-day window", rt.call("d", dsc("a=x,a=y")), ok, rt.limited(ok, "", 1, year, 0))
}

// TestCompatibleHits: every hit counts, rejected or not (INCRBY, then the
// count compared with the limit); hits_addend 0 adds nothing and asks
// about the count as it is (OK at the limit, OVER_LIMIT past it).
func TestCompatibleHits(t *testing.T) {
	rt := newRLST(t, compat)
	u := func(n uint64) *rlsv3.RateLimitResponse { return rt.call("d", dsc("named=x", hits(n))) }
	rt.expect("9 of 10", u(9), ok, rt.limited(ok, "the_name", 10, hour, 1))
	rt.expect("0 at 9", u(0), ok, rt.limited(ok, "the_name", 10, hour, 1))
	rt.expect("1 more: 10 of 10", u(1), ok, rt.limited(ok, "the_name", 10, hour, 0))
	rt.expect("0 at the limit", u(0), ok, rt.limited(ok, "the_name", 10, hour, 0))
	rt.expect("5 more: 15, over", u(5), over, rt.limited(over, "the_name", 10, hour, 0))
	rt.expect("0 past the limit", u(0), over, rt.limited(over, "the_name", 10, hour, 0))
	// Without compatibility a rejected hit is not counted, and 0 asks
	// about one hit.
	rt = newRLST(t, "")
	big := rt.call("d", dsc("named=x", hits(9)))
	if big.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("9 of 10: %v", big)
	}
	if r := rt.call("d", dsc("named=x", hits(5))); r.OverallCode != over {
		t.Fatalf("5 more: %v", r)
	}
	if r := rt.call("d", dsc("named=x", hits(1))); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("limitproxy's own counting: 1 more after a rejected 5 is the 10th: %v", r)
	}
	if r := rt.call("d", dsc("named=x", hits(0))); r.OverallCode != over {
		t.Errorf("limitproxy's own hits_addend 0 at the limit asks about one hit: %v", r)
	}
	// A request's hits_addend when the descriptor has none; 0 is 1.
	rt = newRLST(t, compat)
	resp, err := rt.s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 2, Descriptors: []*rlscommon.RateLimitDescriptor{dsc("user=u")}})
	if err != nil {
		t.Fatal(err)
	}
	rt.expect("the request's hits_addend", resp, ok, rt.limited(ok, "", 3, minute, 1))
	rt.expect("the descriptor's own beats it", rt.call("d", dsc("user=u", hits(1))), ok, rt.limited(ok, "", 3, minute, 0))
}

// TestCompatibleZero: a limit of 0 (requests_per_unit: 0): a hit is over,
// counted; hits_addend 0 on a fresh window is OK with nothing remaining,
// after a hit OVER_LIMIT. Without compatibility: every descriptor over,
// nothing counted.
func TestCompatibleZero(t *testing.T) {
	rt := newRLST(t, compat)
	rt.expect("0 hits, fresh", rt.call("d", dsc("block=x", hits(0))), ok, rt.limited(ok, "", 0, second, 0))
	rt.expect("a hit", rt.call("d", dsc("block=x")), over, rt.limited(over, "", 0, second, 0))
	rt.expect("0 hits after it", rt.call("d", dsc("block=x", hits(0))), over, rt.limited(over, "", 0, second, 0))
	rt = newRLST(t, "")
	for _, n := range []uint64{0, 1} {
		r := rt.call("d", dsc("block=x", hits(n)))
		if r.OverallCode != over || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 || r.Statuses[0].LimitRemaining != 0 {
			t.Errorf("limitproxy's own, %d hits: %v", n, r)
		}
		if pol := headerOf(r, "ratelimit-policy"); pol != `"d.block";q=0;w=1` {
			t.Errorf("limitproxy's own, %d hits: RateLimit-Policy %q, want a quota of 0", n, pol)
		}
	}
}

// TestCompatibleWithoutLimits: unlimited (OK, limit_remaining MaxUint32,
// nothing else), a policy without limits and an unknown domain or
// descriptor (OK, nothing else); the same without compatibility.
func TestCompatibleWithoutLimits(t *testing.T) {
	for _, rls := range []string{compat, ""} {
		rt := newRLST(t, rls)
		rt.expect("unlimited", rt.call("d", dsc("free=x")), ok, unlimited())
		rt.expect("without limits", rt.call("d", dsc("allowed=x")), ok, bare())
		rt.expect("no policy", rt.call("d", dsc("nobody=x")), ok, bare())
		rt.expect("unknown domain", rt.call("elsewhere", dsc("user=x")), ok, bare())
		if rls == compat {
			rt.expect("all at once", rt.call("d", dsc("free=x"), dsc("allowed=x"), dsc("user=u")), ok,
				unlimited(), bare(), rt.limited(ok, "", 3, minute, 2))
		}
	}
}

// TestReplaces: a descriptor whose limit is named in another's replaces
// is not decided (OK, nothing else) nor counted, whatever the order;
// alone, it is.
func TestReplaces(t *testing.T) {
	rt := newRLST(t, compat)
	rt.expect("replaced", rt.call("d", dsc("specific=x"), dsc("replacing=x")), ok, bare(), rt.limited(ok, "", 10, day, 9))
	rt.expect("replaced, after", rt.call("d", dsc("replacing=x"), dsc("specific=x")), ok, rt.limited(ok, "", 10, day, 8), bare())
	rt.expect("alone: never counted before", rt.call("d", dsc("specific=x")), ok, rt.limited(ok, "specific_limit", 5, day, 4))
	// A descriptor's own limit replaces nothing: the policy it would
	// have had is not in force for it.
	rt.expect("an own limit replaces nothing", rt.call("d", dsc("specific=x"), dsc("replacing=y", own(2, typev3.RateLimitUnit_DAY))), ok,
		rt.limited(ok, "specific_limit", 5, day, 3), rt.limited(ok, "", 2, day, 1))
	// Of the policy's window, it counts in the policy's state: 2 hits of
	// replacing=x before, and this one, over 2.
	rt.expect("an own limit counts with its policy", rt.call("d", dsc("replacing=x", own(2, typev3.RateLimitUnit_DAY))), over,
		rt.limited(over, "", 2, day, 0))
}

// TestQuotaMode: a quota over its limit says OVER_LIMIT in its status;
// the call is OVER_LIMIT when every quota of it is over (whatever the
// others), or a descriptor that is no quota is; [rls] quota_mode makes every descriptor a quota (but unlimited
// ones); [rls] shadow_mode makes every call OK, statuses unchanged.
func TestQuotaMode(t *testing.T) {
	rt := newRLST(t, compat)
	rt.expect("a quota, within", rt.call("d", dsc("quota=q")), ok, rt.limited(ok, "", 1, month, 0))
	rt.expect("the only quota over, another OK", rt.call("d", dsc("quota=q"), dsc("user=u")), over,
		rt.limited(over, "", 1, month, 0), rt.limited(ok, "", 3, minute, 2))
	rt.expect("the only quota over", rt.call("d", dsc("quota=q")), over, rt.limited(over, "", 1, month, 0))
	rt.expect("two quotas, one over", rt.call("d", dsc("quota=q"), dsc("quota=r")), ok,
		rt.limited(over, "", 1, month, 0), rt.limited(ok, "", 1, month, 0))
	rt.expect("a quota over, another over", rt.call("d", dsc("quota=q"), dsc("block=x")), over,
		rt.limited(over, "", 1, month, 0), rt.limited(over, "", 0, second, 0))

	rt = newRLST(t, compat+"quota_mode = true\n")
	rt.call("d", dsc("user=u"), dsc("user=u"), dsc("user=u"))
	rt.expect("every descriptor a quota", rt.call("d", dsc("user=u"), dsc("nobody=x")), ok, rt.limited(over, "", 3, minute, 0), bare())
	rt.expect("all quotas over", rt.call("d", dsc("user=u")), over, rt.limited(over, "", 3, minute, 0))
	rt.expect("unlimited is no quota", rt.call("d", dsc("user=u"), dsc("free=x")), over, rt.limited(over, "", 3, minute, 0), unlimited())

	rt = newRLST(t, compat+"shadow_mode = true\n")
	rt.call("d", dsc("user=u"), dsc("user=u"), dsc("user=u"))
	rt.expect("shadow_mode", rt.call("d", dsc("user=u")), ok, rt.limited(over, "", 3, minute, 0))
}

// TestCompatibleShadowPolicy: a shadow policy over its limit is OK with
// nothing remaining, and counts on.
func TestCompatibleShadowPolicy(t *testing.T) {
	rt := newRLST(t, compat)
	rt.expect("within", rt.call("d", dsc("shadow=s")), ok, rt.limited(ok, "", 1, week, 0))
	rt.expect("over, shadow", rt.call("d", dsc("shadow=s")), ok, rt.limited(ok, "", 1, week, 0))
	rt.expect("0 hits: the count is past it", rt.call("d", dsc("shadow=s", hits(0))), ok, rt.limited(ok, "", 1, week, 0))
}

// TestOwnLimit: a descriptor's limit (Envoy's override) decides it
// instead of the policy: its rpu and unit, no name; counted with the
// policy's state when the unit is the policy's window, apart otherwise;
// for a descriptor no policy matches in a known domain too; ignored in an
// unknown domain, and without compatibility.
func TestOwnLimit(t *testing.T) {
	rt := newRLST(t, compat+`domains = ["known"]`+"\n")
	rt.expect("own 1 a minute", rt.call("d", dsc("user=u", own(1, typev3.RateLimitUnit_MINUTE))), ok, rt.limited(ok, "", 1, minute, 0))
	rt.expect("own 1 a minute, again", rt.call("d", dsc("user=u", own(1, typev3.RateLimitUnit_MINUTE))), over, rt.limited(over, "", 1, minute, 0))
	rt.expect("the policy's 3 a minute: the same count", rt.call("d", dsc("user=u")), ok, rt.limited(ok, "", 3, minute, 0))
	rt.expect("own 2 an hour: another count", rt.call("d", dsc("user=u", own(2, typev3.RateLimitUnit_HOUR))), ok, rt.limited(ok, "", 2, hour, 1))
	rt.expect("own, no policy", rt.call("d", dsc("nobody=x", own(1, typev3.RateLimitUnit_SECOND))), ok, rt.limited(ok, "", 1, second, 0))
	rt.expect("own, unlimited policy", rt.call("d", dsc("free=x", own(0, typev3.RateLimitUnit_SECOND))), over, rt.limited(over, "", 0, second, 0))
	rt.expect("own, a domain of [rls] domains", rt.call("known", dsc("k=x", own(5, typev3.RateLimitUnit_DAY))), ok, rt.limited(ok, "", 5, day, 4))
	rt.expect("own, an unknown domain", rt.call("elsewhere", dsc("k=x", own(5, typev3.RateLimitUnit_DAY))), ok, bare())
	week := typev3.RateLimitUnit(7) // WEEK, by number as the reference reads it
	rt.expect("own, WEEK", rt.call("d", dsc("nobody=x", own(5, week))), ok, rt.limited(ok, "", 5, rlsv3.RateLimitResponse_RateLimit_WEEK, 4))
	if _, err := rt.s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlscommon.RateLimitDescriptor{dsc("user=u", own(5, typev3.RateLimitUnit_UNKNOWN))}}); err == nil {
		t.Error("a limit of unit UNKNOWN accepted")
	}
	rt = newRLST(t, "")
	if r := rt.call("d", dsc("user=u", own(0, typev3.RateLimitUnit_MINUTE))); r.OverallCode != ok || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Errorf("without compatibility a descriptor's limit is ignored: %v", r)
	}
}

// TestRepeatedKey: a descriptor that repeats a key is counted under
// every entry's value: (a=x,a=y) and (a=x,a=z) apart.
func TestRepeatedKey(t *testing.T) {
	rt := newRLST(t, compat)
	rt.expect("a=x,a=y", rt.call("d", dsc("a=x,a=y")), ok, rt.limited(ok, "", 1, year, 0))
	rt.expect("a=x,a=z", rt.call("d", dsc("a=x,a=z")), ok, rt.limited(ok, "", 1, year, 0))
	rt.expect("a=x,a=y again", rt.call("d", dsc("a=x,a=y")), over, rt.limited(over, "", 1, year, 0))
	// descriptor:s#2: the second entry's value alone (share_threshold on
	// the first, as import writes it).
	rt.expect("s=x,s=y", rt.call("d", dsc("s=x,s=y")), ok, rt.limited(ok, "", 1, year, 0))
	rt.expect("s=z,s=y: the same count", rt.call("d", dsc("s=z,s=y")), over, rt.limited(over, "", 1, year, 0))
	rt.expect("s=x,s=w: another", rt.call("d", dsc("s=x,s=w")), ok, rt.limited(ok, "", 1, year, 0))
}

// TestEnvoyHeaders: response_headers = "none" adds none (the reference's
// default); "envoy" adds its three, named as configured, of the status
// with the fewest remaining (the first of equals), or of the last over
// its limit; none when no status has a limit.
func TestEnvoyHeaders(t *testing.T) {
	rt := newRLST(t, compat)
	if r := rt.call("d", dsc("user=u")); len(r.ResponseHeadersToAdd) != 0 {
		t.Errorf("response_headers = \"none\": %v", r.ResponseHeadersToAdd)
	}
	rt = newRLST(t, `compatibility = "envoyproxy/ratelimit"
response_headers = "envoy"
limit_header = "X-Limit"
`)
	headers := func(r *rlsv3.RateLimitResponse) string {
		var s []string
		for _, h := range r.ResponseHeadersToAdd {
			s = append(s, h.Key+": "+h.Value)
		}
		return strings.Join(s, ", ")
	}
	reset := func(unit rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
		w, _ := UnitWindow(unit)
		sec := int64(w / time.Second)
		return sec - rt.now.Unix()%sec
	}
	for _, c := range []struct {
		name string
		ds   []*rlscommon.RateLimitDescriptor
		want string
	}{
		{"no limit", []*rlscommon.RateLimitDescriptor{dsc("free=x"), dsc("allowed=x")}, ""},
		{"one", []*rlscommon.RateLimitDescriptor{dsc("user=u")}, fmt.Sprintf("X-Limit: 3, RateLimit-Remaining: 2, RateLimit-Reset: %d", reset(minute))},
		{"the fewest remaining", []*rlscommon.RateLimitDescriptor{dsc("named=n"), dsc("user=u"), dsc("user=v")}, fmt.Sprintf("X-Limit: 3, RateLimit-Remaining: 1, RateLimit-Reset: %d", reset(minute))},
		{"the last over", []*rlscommon.RateLimitDescriptor{dsc("block=x"), dsc("user=u"), dsc("named=n", hits(20))}, fmt.Sprintf("X-Limit: 10, RateLimit-Remaining: 0, RateLimit-Reset: %d", reset(hour))},
	} {
		if got := headers(rt.call("d", c.ds...)); got != c.want {
			t.Errorf("%s: headers %q, want %q", c.name, got, c.want)
		}
	}
}

func headerOf(r *rlsv3.RateLimitResponse, name string) string {
	for _, h := range r.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

// redisServers holds, for a test run on Redis (TestCompatibleOnRedis),
// its server's address, by test name.
var redisServers sync.Map

// redisAddr is the Redis server t's tests run on: its own or its
// parent's; "" for the memory store.
func redisAddr(t *testing.T) string {
	for name := t.Name(); name != ""; {
		if a, ok := redisServers.Load(name); ok {
			return a.(string)
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			break
		}
		name = name[:i]
	}
	return ""
}

// TestCompatibleOnRedis runs the tests of compatible counting with the
// Redis store (its script's fixed window, Charge, at the test's instants).
func TestCompatibleOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	redisServers.Store(t.Name(), srv.Addr())
	defer redisServers.Delete(t.Name())
	for name, test := range map[string]func(*testing.T){
		"KeyOnlyRule": TestCompatibleKeyOnlyRule, "Hits": TestCompatibleHits, "Zero": TestCompatibleZero,
		"WithoutLimits": TestCompatibleWithoutLimits, "Replaces": TestReplaces, "QuotaMode": TestQuotaMode,
		"ShadowPolicy": TestCompatibleShadowPolicy, "OwnLimit": TestOwnLimit, "StopIncrement": TestStopIncrement, "DynamicMetadata": TestDynamicMetadata, "RepeatedKey": TestRepeatedKey, "Input": TestCompatibleInput,
		"CountKeys": TestCountKeys, "ShareThresholdLiteral": TestShareThresholdLiteral, "LargestLimit": TestLargestLimit, "NamedByWindowStart": TestCountsNamedByWindowStart,
	} {
		t.Run(name, test)
	}
}

// TestCompatibleInput: the reference answers a descriptor without entries
// (OK, or by its own limit), one with an empty key (matched as any other:
// no policy has one), and counts negative hits as hits; with
// compatibility so does the service, without it they are refused.
func TestCompatibleInput(t *testing.T) {
	rt := newRLST(t, compat)
	empty := &rlscommon.RateLimitDescriptor{}
	rt.expect("no entries", rt.call("d", empty), ok, bare())
	emptyOwn := &rlscommon.RateLimitDescriptor{Limit: &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}}
	rt.expect("no entries, own limit", rt.call("d", emptyOwn), ok, rt.limited(ok, "", 1, hour, 0))
	rt.expect("no entries, own limit again", rt.call("d", emptyOwn), over, rt.limited(over, "", 1, hour, 0))
	rt.expect("an empty key", rt.call("d", dsc("=x")), ok, bare())
	negative := dsc("user=u")
	negative.IsNegativeHits = true
	rt.expect("negative hits count", rt.call("d", negative), ok, rt.limited(ok, "", 3, minute, 2))

	rt = newRLST(t, "")
	for name, d := range map[string]*rlscommon.RateLimitDescriptor{"no entries": empty, "an empty key": dsc("=x"), "negative hits": negative} {
		if _, err := rt.s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlscommon.RateLimitDescriptor{d}}); err == nil {
			t.Errorf("without compatibility, %s accepted", name)
		}
	}
}

// TestCompatibleBadInputCodes: the reference's shouldRateLimitWorker
// checks the domain and the descriptor list with checkServiceErr, which
// panics a serviceError that ShouldRateLimit returns as a plain error:
// gRPC's UNKNOWN, with its message. With compatibility the service
// answers so; without, INVALID_ARGUMENT.
func TestCompatibleBadInputCodes(t *testing.T) {
	for _, c := range []struct {
		rls  string
		code codes.Code
	}{{compat, codes.Unknown}, {"", codes.InvalidArgument}} {
		rt := newRLST(t, c.rls)
		for _, b := range []struct {
			req *rlsv3.RateLimitRequest
			msg string
		}{
			{&rlsv3.RateLimitRequest{Descriptors: []*rlscommon.RateLimitDescriptor{dsc("user=u")}}, "rate limit domain must not be empty"},
			{&rlsv3.RateLimitRequest{Domain: "d"}, "rate limit descriptor list must not be empty"},
		} {
			_, err := rt.s.ShouldRateLimit(context.Background(), b.req)
			if st, _ := status.FromError(err); st.Code() != c.code || st.Message() != b.msg {
				t.Errorf("%q: %v, want %v %q", c.rls, err, c.code, b.msg)
			}
		}
	}
}

// TestStopIncrement: stop_increment_when_over_limit is the reference's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (src/redis/fixed_cache_impl.go,
// DoLimit and getHitsAddend): the counts are read first (GET); a
// descriptor whose count and hits pass its limit is near
// (IsOverLimitThresholdReached); when one is, only the near ones are
// incremented, the others INCRBY 0 and are answered by their count
// (limit_remaining the limit less it). Without one near, every hit
// counts. Without compatibility the key is refused.
func TestStopIncrement(t *testing.T) {
	rt := newRLST(t, compat+"stop_increment_when_over_limit = true\n")
	rt.expect("none near", rt.call("d", dsc("user=u", hits(2))), ok, rt.limited(ok, "", 3, minute, 1))
	rt.expect("user near", rt.call("d", dsc("user=u", hits(2)), dsc("named=x")), over,
		rt.limited(over, "", 3, minute, 0), rt.limited(ok, "the_name", 10, hour, 10))
	rt.expect("named was not counted", rt.call("d", dsc("named=x")), ok, rt.limited(ok, "the_name", 10, hour, 9))
	rt.expect("user over, checked", rt.call("d", dsc("user=u", hits(0)), dsc("named=x")), over,
		rt.limited(over, "", 3, minute, 0), rt.limited(ok, "the_name", 10, hour, 9))
	rt.expect("own limit near", rt.call("d", dsc("own=o", own(1, typev3.RateLimitUnit_HOUR), hits(2)), dsc("named=x")), over,
		rt.limited(over, "", 1, hour, 0), rt.limited(ok, "the_name", 10, hour, 9))

	rt = newRLST(t, compat)
	rt.call("d", dsc("user=u", hits(2)))
	rt.expect("without the option", rt.call("d", dsc("user=u", hits(2)), dsc("named=x")), over,
		rt.limited(over, "", 3, minute, 0), rt.limited(ok, "the_name", 10, hour, 9))

	if _, err := config.Parse("x.toml", []byte("[rls]\nlisten = \"127.0.0.1:0\"\nstop_increment_when_over_limit = true\n"+compatPolicies)); err == nil || !strings.Contains(err.Error(), "stop_increment_when_over_limit") {
		t.Errorf("without compatibility: %v", err)
	}
}

// TestDynamicMetadata: dynamic_metadata is the reference's
// RESPONSE_DYNAMIC_METADATA (src/service/ratelimit.go,
// ratelimitToMetadata): the domain, each descriptor's entries as
// "KEY=VALUE", its limit's String() and its hits_addend when set, the
// call's hits_addend when not 0, and the metadata of the descriptors
// that passed (a limit, not unlimited, not OVER_LIMIT; a shadow
// policy's over is OK, so passed) merged by mergeMetadata (the first of
// a key stays; tables merge). Without the key, none.
func TestDynamicMetadata(t *testing.T) {
	rt := newRLST(t, compat+"dynamic_metadata = true\n")
	st := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	check := func(step string, resp *rlsv3.RateLimitResponse, want map[string]any) {
		t.Helper()
		if w := st(want); !proto.Equal(resp.DynamicMetadata, w) {
			t.Errorf("%s:\n got %v\nwant %v", step, resp.DynamicMetadata, w)
		}
	}
	entries := func(es ...any) map[string]any { return map[string]any{"entries": es} }
	check("both passed", rt.call("d", dsc("user=u"), dsc("named=x")), map[string]any{
		"domain": "d", "descriptors": []any{entries("user=u"), entries("named=x")},
		"metadata": map[string]any{"team": "a", "only": "named", "nested": map[string]any{"x": 1, "y": 2.5, "list": []any{"p", true}}},
	})
	d := dsc("user=u", hits(5))
	ownD := dsc("free=f", own(7, typev3.RateLimitUnit_MINUTE), hits(0))
	resp, err := rt.s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 2, Descriptors: []*rlscommon.RateLimitDescriptor{d, dsc("named=x"), dsc("shadow=s"), dsc("shadow=s"), ownD, dsc("free=g")}})
	if err != nil {
		t.Fatal(err)
	}
	check("user over, shadow over, an own limit, unlimited", resp, map[string]any{
		"domain": "d", "hitsAddend": 2,
		"descriptors": []any{
			map[string]any{"entries": []any{"user=u"}, "hitsAddend": 5}, entries("named=x"), entries("shadow=s"), entries("shadow=s"),
			map[string]any{"entries": []any{"free=f"}, "hitsAddend": 0, "limit": ownD.Limit.String()}, entries("free=g"),
		},
		"metadata": map[string]any{"team": "b", "only": "named", "shadow": true, "nested": map[string]any{"y": 2.5}},
	})
	if resp := newRLST(t, compat).call("d", dsc("user=u")); resp.DynamicMetadata != nil {
		t.Errorf("without dynamic_metadata: %v", resp.DynamicMetadata)
	}
}
