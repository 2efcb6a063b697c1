package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/redisstore"
)

// TestCalendarTTL: a calendar window's key expires at the window's real
// end: with Redis's own clock (the grid sent from the caller's), and with
// the caller's instants (plus the slack such tests add) across Berlin's
// 23-hour day.
func TestCalendarTTL(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	ctx := context.Background()
	pttl := func(prefix string) time.Duration {
		t.Helper()
		keys, err := c.Keys(ctx, prefix+"*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys %v, %v", keys, err)
		}
		return c.PTTL(ctx, keys[0]).Val()
	}

	day, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Calendar: limiter.CalendarDay})
	l, _ := limiter.New(newStore(t, c, redisstore.Options{Timeout: 5 * time.Second, Prefix: "redis-clock:"}), "ttl", day)
	now := time.Now()
	if d, err := l.Allow(ctx, "client", now, 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	midnight := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if got, want := pttl("redis-clock:"), midnight.Sub(now); got > want || got < want-5*time.Second {
		t.Errorf("with Redis's clock at %v: TTL %v, want the %v until UTC midnight", now, got, want)
	}

	berlin, _ := time.LoadLocation("Europe/Berlin")
	bday, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Calendar: limiter.CalendarDay, TimeZone: berlin})
	l2, _ := limiter.New(newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second, Prefix: "caller-clock:"}), "ttl", bday)
	at := time.Date(2026, 3, 29, 0, 30, 0, 0, berlin)
	if d, err := l2.Allow(ctx, "client", at, 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	const slack = time.Hour // what CallerTime adds, as Redis expires keys on its own clock
	if got, want := pttl("caller-clock:"), 22*time.Hour+30*time.Minute+slack; got > want || got < want-5*time.Second {
		t.Errorf("at 00:30 on Berlin's 23-hour day: TTL %v, want %v (22h30m and the slack)", got, want)
	}
}

// TestCalendarSkew: the script picks, among the windows around the
// caller's instant that it is sent, the one holding its own instant:
// Redis's clock ahead across the window's end counts in the next window,
// behind across it in the one before; a clock more than a window away
// counts in the nearest window, with a Retry-After and a reset that stay
// ahead of the caller.
func TestCalendarSkew(t *testing.T) {
	t.Parallel()
	c := startRedis(t)
	ctx := context.Background()
	ny, _ := time.LoadLocation("America/New_York")
	day, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 2, Calendar: limiter.CalendarDay, TimeZone: ny})
	store := newStore(t, c, redisstore.Options{CallerTime: true, Timeout: 5 * time.Second})
	l, _ := limiter.New(store, "skew", day)
	end := time.Date(2025, 3, 10, 0, 0, 0, 0, ny) // of the 23-hour 9th
	allow := func(key string, now time.Time, skew time.Duration) limiter.Decision {
		t.Helper()
		store.SetSkew(skew)
		d, err := l.Allow(ctx, key, now, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// The caller's clock a second before midnight, Redis's a second after:
	// the 10th, fresh, ending 24 hours after it, as the caller reads it.
	for range 2 {
		allow("ahead", end.Add(-time.Second), 0)
	}
	if d := allow("ahead", end.Add(-time.Second), 2*time.Second); !d.Allowed || d.Remaining != 1 || !d.ResetAt.Equal(end.Add(24*time.Hour-2*time.Second)) {
		t.Errorf("Redis 2s ahead across midnight: %+v, want the 10th's window, reset at its end by the caller's clock", d)
	}
	// The caller a second after, Redis a second before: the full 9th.
	for range 2 {
		allow("behind", end.Add(-time.Second), 0)
	}
	if d := allow("behind", end.Add(time.Second), -2*time.Second); d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("Redis 2s behind across midnight: %+v, want the full 9th, a second to go", d)
	}
	// Redis exactly at midnight: the 10th, not the full 9th.
	for range 2 {
		allow("exact", end.Add(-time.Second), 0)
	}
	if d := allow("exact", end.Add(-time.Second), time.Second); !d.Allowed || !d.ResetAt.Equal(end.Add(24*time.Hour-time.Second)) {
		t.Errorf("Redis at midnight, the caller a second before: %+v, want the 10th's window", d)
	}
	// A refund on the 9th, by Redis's clock, of a reservation of the 8th:
	// nothing from the 9th's count.
	allow("refund", end.Add(-2*time.Hour), 0)
	store.SetSkew(-2 * time.Second)
	if d, err := l.Charge(ctx, "refund", end.Add(time.Second), end.Add(-30*time.Hour), -1); err != nil || d.Remaining != 1 {
		t.Errorf("refund of the 8th's reservation on the 9th: %+v, %v, want the 9th's one unit kept", d, err)
	}
	// More than a window apart: the nearest window, times still ahead.
	for _, skew := range []time.Duration{50 * time.Hour, -50 * time.Hour} {
		for i := range 3 {
			d := allow("far", end.Add(time.Duration(i)), skew)
			if d.Allowed != (i < 2) || d.RetryAfter < 0 || !d.ResetAt.After(end) || d.Next <= 0 {
				t.Errorf("Redis %v off, request %d: %+v", skew, i, d)
			}
		}
		store.SetSkew(0)
		l.Reset(ctx, "far")
	}
}
