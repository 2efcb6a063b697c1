package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/limitproxy/limitproxy/bench/internal/rlsgen"
	"github.com/limitproxy/limitproxy/internal/redistest"
)

// WindowStartsEnv, set, runs TestWindowStarts, which waits for the
// next minute (30 s on average).
const WindowStartsEnv = "RLSDIFF_WINDOW_STARTS"

// TestWindowStarts pins what the reference's counts named by their
// window's start, each expiring its unit after its last addition, answer
// (docs/envoy.md, "Costs"): at a minute's first second a descriptor's
// own limit per second counts with its rule's minute, and per minute
// with a rule's second; two seconds later, each count, last added to per
// second, has ended, the minute's too. Every answer of limitproxy on each
// store must be the reference's, field by field. The reference runs
// with EXPIRATION_JITTER_MAX_SECONDS=0 (runBatch), without the random
// seconds it adds to each expiry by default.
//
//	RLSDIFF_WINDOW_STARTS=1 go test -run TestWindowStarts -v ./rlsdiff
func TestWindowStarts(t *testing.T) {
	if testing.Short() || os.Getenv(WindowStartsEnv) == "" {
		t.Skip("waits for the next minute: set " + WindowStartsEnv + "=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	ref := buildReference(t, ctx, tmp)
	lp := buildLimitproxy(t, ctx, tmp)
	redis := redistest.Start(t)
	yaml := `domain: w
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 2}
`
	d := func(kv string, own *rlscommon.RateLimitDescriptor_RateLimitOverride) *rlsv3.RateLimitRequest {
		k, v, _ := strings.Cut(kv, "=")
		return &rlsv3.RateLimitRequest{Domain: "w", Descriptors: []*rlscommon.RateLimitDescriptor{{
			Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: k, Value: v}}, Limit: own}}}
	}
	per := func(rpu uint32, u typev3.RateLimitUnit) *rlscommon.RateLimitDescriptor_RateLimitOverride {
		return &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: u}
	}
	c := &rlsgen.Case{Domain: "w", Files: map[string][]byte{"w.yaml": []byte(yaml)}, AtMinute: true, Waits: []int{5, 5}, Calls: []*rlsv3.RateLimitRequest{
		d("user=u", nil), // the minute's count: 1 of 3
		d("user=u", per(5, typev3.RateLimitUnit_DAY)),    // a day's: the same count at a day's start only
		d("user=u", per(5, typev3.RateLimitUnit_SECOND)), // the minute's count, expiring a second on
		d("sec=s", per(10, typev3.RateLimitUnit_MINUTE)), // the second's count, per minute
		d("sec=s", nil), // the second's rule: 2 of 2, expiring a second on
		// two seconds on
		d("user=u", nil), // the minute's count ended a second after its last addition
		d("sec=s", per(10, typev3.RateLimitUnit_MINUTE)), // so did the minute's of sec=s
		d("sec=s", nil), // another second
		d("user=u", per(5, typev3.RateLimitUnit_SECOND)),
	}}
	var tally generatedTally
	runBatch(ctx, t, ref.Bin, lp, redis.Addr(), "defaults", nil, []*rlsgen.Case{c}, &tally)
	if tally.configs != 1 {
		t.Fatalf("the calls spanned more seconds than their waits")
	}
	t.Logf("%d calls at a minute's start and two seconds on, reference %s: every answer the reference's on each store", tally.calls, ref.Version)
}
