package envoyimport

import (
	"context"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
	"github.com/limitproxy/limitproxy/limiter/memstore"
)

// referenceDividers is envoyproxy/ratelimit's UnitToDivider
// (src/utils/utilities.go at f2fb157, 2026): a unit's window in seconds.
var referenceDividers = map[string]int64{
	"second": 1, "minute": 60, "hour": 60 * 60, "day": 60 * 60 * 24,
	"week": 60 * 60 * 24 * 7, "month": 60 * 60 * 24 * 30, "year": 60 * 60 * 24 * 365,
}

// TestUnitWindowsAsTheReference: each unit's imported window resets when
// the reference's does (CalculateReset: divider − now mod divider
// seconds) at instants around the ends of months, years and weeks, so
// an import decides as the reference did. The reference's month, year and
// week are not calendar ones, which is why they are not imported as
// calendar windows; its day is the UTC day, so "24h" and window = "day"
// agree.
func TestUnitWindowsAsTheReference(t *testing.T) {
	if len(Units) != len(referenceDividers) {
		t.Fatalf("units %v, the reference's %v", Units, referenceDividers)
	}
	store := memstore.New(memstore.Options{})
	ctx := context.Background()
	instants := []time.Time{
		time.Date(2026, 1, 31, 12, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 1, 0, time.UTC),
		time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC), time.Date(2024, 12, 31, 23, 0, 0, 0, time.UTC),
		time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC),
	}
	calendar := map[string]limiter.Calendar{"day": limiter.CalendarDay, "week": limiter.CalendarWeek, "month": limiter.CalendarMonth, "year": limiter.CalendarYear}
	for unit, divider := range referenceDividers {
		w, err := time.ParseDuration(window(unit))
		if err != nil || w != time.Duration(divider)*time.Second {
			t.Errorf("%s: window %q, want %d seconds", unit, window(unit), divider)
			continue
		}
		imported, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1, Window: w})
		l, _ := limiter.New(store, "import-"+unit, imported)
		differs := false
		for _, at := range instants {
			d, err := l.Allow(ctx, at.String(), at, 1)
			if err != nil {
				t.Fatal(err)
			}
			now := at.Unix()
			if got, want := d.ResetAt.Sub(at), time.Duration(divider-now%divider)*time.Second; got != want {
				t.Errorf("%s at %v: resets in %v, the reference in %v", unit, at, got, want)
			}
			if cal, ok := calendar[unit]; ok {
				c, _ := limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 1, Calendar: cal})
				cl, _ := limiter.New(store, "calendar-"+unit, c)
				cd, _ := cl.Allow(ctx, at.String(), at, 1)
				differs = differs || !cd.ResetAt.Equal(d.ResetAt)
			}
		}
		// The calendar windows in UTC: the day is the reference's; the
		// week, month and year are not.
		if _, ok := calendar[unit]; ok && differs != (unit != "day") {
			t.Errorf("%s: a calendar window in UTC ends where the reference's does: %v, want %v", unit, !differs, unit == "day")
		}
	}
}
