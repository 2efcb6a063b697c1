package rls

import (
	"context"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/policy"
	"github.com/limitproxy/limitproxy/policy/config"
	"github.com/limitproxy/limitproxy/proxy"
)

// TestCurrentLimitCalendar: a calendar window is its quota per its unit
// (a month is MONTH, not 2,629,746 seconds, its nominal length), and a
// window of a length is as it was.
func TestCurrentLimitCalendar(t *testing.T) {
	for _, c := range []struct {
		cal   limiter.Calendar
		unit  rlsv3.RateLimitResponse_RateLimit_Unit
		multi uint32 // 0: none
	}{
		{limiter.CalendarDay, rlsv3.RateLimitResponse_RateLimit_DAY, 0},
		{limiter.CalendarWeek, rlsv3.RateLimitResponse_RateLimit_WEEK, 0},
		{limiter.CalendarMonth, rlsv3.RateLimitResponse_RateLimit_MONTH, 0},
		{limiter.CalendarYear, rlsv3.RateLimitResponse_RateLimit_YEAR, 0},
		{0, rlsv3.RateLimitResponse_RateLimit_SECOND, 2629746}, // the same length, not a calendar month
	} {
		rl := CurrentLimit("q", 500, limiter.CalendarMonth.Nominal(), c.cal)
		if c.cal != 0 {
			rl = CurrentLimit("q", 500, c.cal.Nominal(), c.cal)
		}
		if rl.GetUnit() != c.unit || rl.GetRequestsPerUnit() != 500 || rl.GetUnitMultiplier().GetValue() != c.multi || rl.GetName() != "q" {
			t.Errorf("%v: %v, want 500 per %v (multiplier %d)", c.cal, rl, c.unit, c.multi)
		}
	}
	if rl := CurrentLimit("d", 7, 24*time.Hour, 0); rl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY || rl.GetUnitMultiplier() != nil {
		t.Errorf("24h: %v, want DAY", rl)
	}
}

// TestShouldRateLimitCalendar: through the service, a calendar month's
// limit is answered per MONTH, and the time until its reset counts to the
// month's real end: from noon on 2024-02-29 in Kathmandu (+05:45), 12
// hours, to the leap February's end at 18:15 UTC.
func TestShouldRateLimitCalendar(t *testing.T) {
	cfg, err := config.Parse("cal.toml", []byte(`
[rls]
listen = "127.0.0.1:0"
[[policy]]
name = "monthly"
[policy.match]
rls_domain = "cal"
descriptor = ["user"]
[[policy.limits]]
algorithm = "fixed_window"
limit = 2
window = "month"
time_zone = "Asia/Kathmandu"
`))
	if err != nil {
		t.Fatal(err)
	}
	kathmandu, _ := time.LoadLocation("Asia/Kathmandu")
	now := time.Date(2024, 2, 29, 12, 0, 0, 0, kathmandu)
	set, err := policy.Compile(cfg, memstore.New(memstore.Options{}), now)
	if err != nil {
		t.Fatal(err)
	}
	s := &service{h: proxy.New(set, proxy.Options{Now: func() time.Time { return now }}), cfg: cfg.RLS, log: zap.NewNop()}
	req := &rlsv3.RateLimitRequest{Domain: "cal", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Statuses[0]
		if st.Code != want || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MONTH || st.CurrentLimit.GetRequestsPerUnit() != 2 ||
			st.DurationUntilReset.AsDuration() != 12*time.Hour {
			t.Errorf("call %d: %v, want %v, 2 per MONTH, reset in 12h", i, st, want)
		}
	}
}
