package proxy

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitproxy/limitproxy/internal/redistest"
	"github.com/limitproxy/limitproxy/limiter/memstore"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// calendarConfig: a day in Berlin, a month in Chatham (+13:45 in March)
// and a minute, for one key. %s: the upstream's URL.
const calendarConfig = `
[server]
rate_limit_headers = "both"

[[upstream]]
name = "app"
targets = ["%s"]

[[policy]]
name = "cal"
upstream = "app"
key = []
  [[policy.limits]]
  name = "day"
  algorithm = "fixed_window"
  limit = 2
  window = "day"
  time_zone = "Europe/Berlin"
  [[policy.limits]]
  name = "month"
  algorithm = "fixed_window"
  limit = 3
  window = "month"
  time_zone = "Pacific/Chatham"
  [[policy.limits]]
  name = "minute"
  algorithm = "fixed_window"
  limit = 100
  window = "1m"
`

// TestCalendarFields: the rate-limit fields of calendar windows, on both
// stores, by hand from the zone database. At 00:30 in Berlin on
// 2026-03-29, the day the clocks go forward, the day ends in 22 h 30 min
// (81000 s), not 23 h 30 min: RateLimit's t, X-RateLimit-Reset and a
// rejection's Retry-After say so to the second. At the day's end (00:00
// CEST, 22:00 UTC) the day starts again and Chatham's March, whose count
// the rejection did not move, ends at 00:00 +1345 on April 1st, 36 h 15
// min later (130500 s). RateLimit-Policy has no w for the calendar
// windows, and stays the same throughout.
func TestCalendarFields(t *testing.T) {
	up := newUpstream(t, nil)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			clock := newClock()
			clock.ns.Store(time.Date(2026, 3, 29, 0, 30, 0, 0, berlin).UnixNano())
			b := &rlBackend{store: memstore.New(memstore.Options{})}
			if kind == "redis" {
				c := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
				t.Cleanup(func() { c.Close() })
				// The caller's instants: the test's clock, not Redis's.
				rs, err := redisstore.New(c, redisstore.Options{Timeout: time.Second, OnError: "deny", CallerTime: true})
				if err != nil {
					t.Fatal(err)
				}
				b.store = rs
			}
			e := newRLEnv(t, calendarConfig, up.URL, b, clock.now)
			const wantPolicy = `"day";q=2, "month";q=3, "minute";q=100;w=60`
			for i, want := range []struct {
				status     int
				rateLimit  string
				reset      int64
				retryAfter string
			}{
				{200, `"day";r=1;t=81000`, 81000, ""},
				{200, `"day";r=0;t=81000`, 81000, ""},
				{429, `"day";r=0;t=81000`, 81000, "81000"},
				{200, `"month";r=0;t=130500`, 130500, ""}, // at the day's end
				{429, `"month";r=0;t=130500`, 130500, "130500"},
			} {
				if i == 3 {
					clock.ns.Store(time.Date(2026, 3, 30, 0, 0, 0, 0, berlin).UnixNano())
				}
				status, h := send(t, http.MethodGet, e.addr+"/x")
				if status != want.status || h.Get("Ratelimit-Policy") != wantPolicy || h.Get("Ratelimit") != want.rateLimit ||
					h.Get("X-Ratelimit-Reset") != strconv.FormatInt(want.reset, 10) || h.Get("Retry-After") != want.retryAfter {
					t.Errorf("request %d: %d, RateLimit-Policy %q, RateLimit %q, X-RateLimit-Reset %q, Retry-After %q; want %d, %q, %q, %d, %q",
						i, status, h.Get("Ratelimit-Policy"), h.Get("Ratelimit"), h.Get("X-Ratelimit-Reset"), h.Get("Retry-After"),
						want.status, wantPolicy, want.rateLimit, want.reset, want.retryAfter)
				}
			}
		})
	}
}
