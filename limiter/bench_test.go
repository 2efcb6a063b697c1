package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// BenchmarkAllow is one decision of a token bucket on a hot key in the
// memory store, through the public API.
func BenchmarkAllow(b *testing.B) {
	tb, err := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1_000_000, Per: time.Second}, Burst: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	l, err := limiter.New(memstore.New(memstore.Options{}), "bench", tb)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := l.Allow(ctx, "k", t0.Add(time.Duration(i)*time.Microsecond), 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllowKeys is a decision of two limits under two keys.
func BenchmarkAllowKeys(b *testing.B) {
	tb, _ := limiter.NewTokenBucket(limiter.TokenBucketParams{Rate: limiter.Rate{N: 1_000_000, Per: time.Second}, Burst: 1_000_000})
	fw, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1_000_000_000, Window: time.Hour})
	l, err := limiter.New(memstore.New(memstore.Options{}), "bench", tb, fw)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	keys := []string{"ip", "api-key"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := l.AllowKeys(ctx, keys, t0.Add(time.Duration(i)*time.Microsecond), 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllowWindow is one decision of a fixed window on a hot key in
// the memory store: a window of an hour, and a calendar day in a zone
// with daylight saving (its window found once, then cached).
func BenchmarkAllowWindow(b *testing.B) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		p    limiter.FixedWindowParams
	}{
		{"hour", limiter.FixedWindowParams{Limit: 1_000_000_000, Window: time.Hour}},
		{"calendar-day", limiter.FixedWindowParams{Limit: 1_000_000_000, Calendar: limiter.CalendarDay, TimeZone: berlin}},
	} {
		b.Run(c.name, func(b *testing.B) {
			fw, err := limiter.NewFixedWindow(c.p)
			if err != nil {
				b.Fatal(err)
			}
			l, err := limiter.New(memstore.New(memstore.Options{}), "bench", fw)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := l.Allow(ctx, "k", t0.Add(time.Duration(i)*time.Microsecond), 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
