package limitertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/limitproxy/limitproxy/limiter"
)

// RunCalendar checks fixed windows counted in calendar periods of a time
// zone (limiter.Calendar): in zones with daylight saving (a 23- and a
// 25-hour day, midnight skipped by a change at 00:00), offsets of 30 and
// 45 minutes, days skipped at the date line, and across month and year
// ends, a window starts and ends exactly where the zone's calendar says
// (written out below from the zone database, zdump -v), the count starts
// again at its end, and Retry-After, ResetAt and Next count to it to the
// store's resolution; random traces around the edges agree with a model
// that finds them by bisecting the local date; and a refund applies only
// within its reservation's period. Instants and edges are whole seconds.
func RunCalendar(t *testing.T, newStore NewStore, o Options) {
	t.Run("Edges", func(t *testing.T) { calendarEdges(t, newStore, o) })
	t.Run("Model", func(t *testing.T) { calendarTraces(t, newStore, o) })
	t.Run("Charge", func(t *testing.T) { calendarCharge(t, newStore) })
}

// calendarCases are windows of an instant, by hand from zdump -v (UTC
// instants; "+0100" and the like are the zone's offset before and after).
var calendarCases = []struct {
	zone       string
	unit       limiter.Calendar
	at         string // an instant in the window
	start, end string // the window
	why        string
}{
	{"Europe/Berlin", limiter.CalendarDay, "2026-03-29T10:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", "23 h: +0100 to +0200 at 02:00"},
	{"Europe/Berlin", limiter.CalendarDay, "2026-10-25T12:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z", "25 h: +0200 to +0100 at 03:00"},
	{"Europe/Berlin", limiter.CalendarMonth, "2026-03-31T21:59:59Z", "2026-02-28T23:00:00Z", "2026-03-31T22:00:00Z", "March, 31 days less an hour"},
	{"Europe/Berlin", limiter.CalendarWeek, "2026-03-29T21:59:59Z", "2026-03-22T23:00:00Z", "2026-03-29T22:00:00Z", "Monday to Sunday, 167 h"},
	{"America/New_York", limiter.CalendarDay, "2025-03-09T12:00:00Z", "2025-03-09T05:00:00Z", "2025-03-10T04:00:00Z", "23 h: EST to EDT"},
	{"America/New_York", limiter.CalendarYear, "2027-01-01T04:59:59Z", "2026-01-01T05:00:00Z", "2027-01-01T05:00:00Z", "still 2026 in New York"},
	{"America/Sao_Paulo", limiter.CalendarDay, "2018-11-04T03:00:00Z", "2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z", "midnight skipped: starts at 01:00 -02"},
	{"America/Sao_Paulo", limiter.CalendarDay, "2018-11-04T02:59:59Z", "2018-11-03T03:00:00Z", "2018-11-04T03:00:00Z", "the day before the skipped midnight"},
	{"America/Sao_Paulo", limiter.CalendarDay, "2019-02-16T12:00:00Z", "2019-02-16T02:00:00Z", "2019-02-17T03:00:00Z", "25 h: 23:00 comes twice"},
	{"America/Havana", limiter.CalendarDay, "2025-03-09T05:00:00Z", "2025-03-09T05:00:00Z", "2025-03-10T04:00:00Z", "midnight skipped: starts at 01:00 CDT"},
	{"America/Havana", limiter.CalendarDay, "2025-11-02T04:00:00Z", "2025-11-02T04:00:00Z", "2025-11-03T05:00:00Z", "25 h: 00:00 to 00:59 come twice, the first midnight starts it"},
	{"America/Santiago", limiter.CalendarDay, "2025-09-07T04:00:00Z", "2025-09-07T04:00:00Z", "2025-09-08T03:00:00Z", "midnight skipped: starts at 01:00 -03"},
	{"America/Santiago", limiter.CalendarWeek, "2025-09-07T03:59:59Z", "2025-09-01T04:00:00Z", "2025-09-08T03:00:00Z", "a week of 167 h ending at the skipped midnight's day"},
	{"America/Santiago", limiter.CalendarDay, "2025-04-05T12:00:00Z", "2025-04-05T03:00:00Z", "2025-04-06T04:00:00Z", "25 h: 23:00 comes twice"},
	{"Australia/Sydney", limiter.CalendarMonth, "2025-04-10T00:00:00Z", "2025-03-31T13:00:00Z", "2025-04-30T14:00:00Z", "April, +1100 to +1000"},
	{"Australia/Sydney", limiter.CalendarYear, "2024-12-31T13:00:00Z", "2024-12-31T13:00:00Z", "2025-12-31T13:00:00Z", "2025 starts in 2024 UTC"},
	{"Australia/Adelaide", limiter.CalendarDay, "2024-10-06T00:00:00Z", "2024-10-05T14:30:00Z", "2024-10-06T13:30:00Z", "23 h at +0930/+1030"},
	{"Australia/Lord_Howe", limiter.CalendarDay, "2025-04-06T00:00:00Z", "2025-04-05T13:00:00Z", "2025-04-06T13:30:00Z", "24.5 h: a change of 30 minutes"},
	{"Asia/Kolkata", limiter.CalendarMonth, "2024-02-29T18:29:59Z", "2024-01-31T18:30:00Z", "2024-02-29T18:30:00Z", "leap February at +0530"},
	{"Asia/Kathmandu", limiter.CalendarMonth, "2025-01-31T18:14:59Z", "2024-12-31T18:15:00Z", "2025-01-31T18:15:00Z", "January at +0545"},
	{"Asia/Kathmandu", limiter.CalendarDay, "2025-02-28T18:15:00Z", "2025-02-28T18:15:00Z", "2025-03-01T18:15:00Z", "March 1st after a February of 28 days"},
	{"Pacific/Chatham", limiter.CalendarWeek, "2024-09-29T10:14:59Z", "2024-09-22T11:15:00Z", "2024-09-29T10:15:00Z", "167 h at +1245/+1345"},
	{"Pacific/Chatham", limiter.CalendarDay, "2024-09-28T14:00:00Z", "2024-09-28T11:15:00Z", "2024-09-29T10:15:00Z", "23 h at +1245/+1345"},
	{"Pacific/Apia", limiter.CalendarDay, "2011-12-30T09:59:59Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z", "the 29th ends where the 31st starts"},
	{"Pacific/Apia", limiter.CalendarDay, "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z", "the 31st, after the skipped 30th"},
	{"Pacific/Apia", limiter.CalendarWeek, "2011-12-28T00:00:00Z", "2011-12-26T10:00:00Z", "2012-01-01T10:00:00Z", "a week of six days"},
	{"Pacific/Apia", limiter.CalendarMonth, "2011-12-30T09:59:59Z", "2011-12-01T10:00:00Z", "2011-12-31T10:00:00Z", "December of 30 days"},
	{"Pacific/Kiritimati", limiter.CalendarYear, "1994-12-31T09:59:59Z", "1994-01-01T10:00:00Z", "1994-12-31T10:00:00Z", "1994 ends after the 30th"},
	{"Pacific/Kiritimati", limiter.CalendarDay, "1994-12-31T10:00:00Z", "1994-12-31T10:00:00Z", "1995-01-01T10:00:00Z", "1995-01-01 after the skipped 31st"},
	{"America/St_Johns", limiter.CalendarDay, "2025-03-09T12:00:00Z", "2025-03-09T03:30:00Z", "2025-03-10T02:30:00Z", "23 h at -0330/-0230"},
	{"Africa/Casablanca", limiter.CalendarDay, "2025-02-23T12:00:00Z", "2025-02-22T23:00:00Z", "2025-02-24T00:00:00Z", "25 h: +01 to +00 for Ramadan"},
	{"Europe/London", limiter.CalendarWeek, "2025-01-01T00:00:00Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z", "an ISO week across the years"},
	{"Europe/London", limiter.CalendarMonth, "2025-10-26T12:00:00Z", "2025-09-30T23:00:00Z", "2025-11-01T00:00:00Z", "October, BST to GMT"},
	{"UTC", limiter.CalendarMonth, "2025-02-28T23:59:59Z", "2025-02-01T00:00:00Z", "2025-03-01T00:00:00Z", "February of 28 days"},
	{"UTC", limiter.CalendarYear, "2024-12-31T23:59:59Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z", "a leap year"},
}

// calendarEdges: in each case's window a limit of 2 admits two requests,
// rejects a third until the window's end exactly, still rejects one
// resolution before it and admits again at it; a fresh key filled one
// resolution before the start is rejected for exactly that long.
func calendarEdges(t *testing.T, newStore NewStore, o Options) {
	res := max(o.Resolution, 1)
	store := newStore(t)
	ctx := context.Background()
	for i, c := range calendarCases {
		loc := zone(t, c.zone)
		lim := must(t)(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 2, Calendar: c.unit, TimeZone: loc}))
		l := mustNew(t, store, "calendar-"+strconv.Itoa(i), lim)
		at, start, end := instant(t, c.at), instant(t, c.start), instant(t, c.end)
		where := fmt.Sprintf("%s %v at %s (%s)", c.zone, c.unit, c.at, c.why)
		allow := func(key string, now time.Time) limiter.Decision {
			t.Helper()
			d, err := l.Allow(ctx, key, now, 1)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			return d
		}
		for j := range int64(2) {
			if d := allow("k", at); !d.Allowed || d.Remaining != 1-j || !d.ResetAt.Equal(end) || d.Next != end.Sub(at) {
				t.Errorf("%s: request %d: %+v, want admitted, %d left, reset at %v", where, j, d, 1-j, end)
			}
		}
		if d := allow("k", at); d.Allowed || d.RetryAfter != end.Sub(at) || d.Next != end.Sub(at) || !d.ResetAt.Equal(end) {
			t.Errorf("%s: third request: %+v, want rejected for %v, until %v", where, d, end.Sub(at), end)
		}
		if d := allow("k", end.Add(-res)); d.Allowed || d.RetryAfter != res {
			t.Errorf("%s: %v before the end: %+v, want rejected for %v", where, res, d, res)
		}
		if d := allow("k", end); !d.Allowed || d.Remaining != 1 {
			t.Errorf("%s: at the end %v: %+v, want a fresh window", where, end, d)
		}
		for range 2 {
			allow("s", start.Add(-res))
		}
		if d := allow("s", start.Add(-res)); d.Allowed || d.RetryAfter != res {
			t.Errorf("%s: the window before, full %v before %v: %+v, want rejected for %v", where, res, start, d, res)
		}
		if d := allow("s", start); !d.Allowed || d.Remaining != 1 || !d.ResetAt.Equal(end) {
			t.Errorf("%s: at the start %v: %+v, want a fresh window until %v", where, start, d, end)
		}
	}
}

// calendarTraces drives random requests through a calendar window and
// its model, in each zone of calendarCases from an instant before one of
// its changes, with gaps that land on the next edge, one resolution
// either side of it, or windows later.
func calendarTraces(t *testing.T, newStore NewStore, o Options) {
	res := int64(max(o.Resolution, 1))
	starts := map[string]string{}
	var zones []string
	for _, c := range calendarCases {
		if _, ok := starts[c.zone]; !ok {
			zones = append(zones, c.zone)
			starts[c.zone] = c.start
		}
	}
	for zi, name := range zones {
		t.Run(name, func(t *testing.T) {
			if o.Parallel {
				t.Parallel()
			}
			store := newStore(t)
			loc := zone(t, name)
			ctx := context.Background()
			for ui, unit := range []limiter.Calendar{limiter.CalendarDay, limiter.CalendarWeek, limiter.CalendarMonth, limiter.CalendarYear} {
				rng := rand.New(rand.NewPCG(uint64(zi), uint64(unit)))
				limit := 1 + rng.Int64N(4)
				lim := must(t)(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: limit, Calendar: unit, TimeZone: loc}))
				l := mustNew(t, store, "calendar-model-"+strconv.Itoa(ui), lim)
				m := &calModel{unit: unit, loc: loc, limit: limit}
				now := instant(t, starts[name]).Add(-2 * 24 * time.Hour).UnixNano()
				for i := range 150 {
					end := m.end(now)
					switch rng.IntN(8) {
					case 0, 1:
					case 2:
						now = end
					case 3:
						now = end - res + rng.Int64N(3)*res
					case 4:
						now = m.end(end) + rng.Int64N(int64(48*time.Hour))
					default:
						now += rng.Int64N(min(end-now, int64(6*time.Hour)) + 1)
					}
					now -= now % res
					want := m.allow(now)
					d, err := l.Allow(ctx, "k", time.Unix(0, now), 1)
					if err != nil {
						t.Fatal(err)
					}
					got := result{d.Allowed, d.RetryAfter, d.Remaining, next(d, now)}
					if got != want {
						t.Fatalf("%v step %d: Allow(%v) = %+v, want %+v", lim, i, time.Unix(0, now).In(loc), got, want)
					}
				}
			}
		})
	}
}

// calendarCharge: a month in Kolkata; a refund within the reservation's
// month gives units back, one in the next month takes nothing from that
// month's count.
func calendarCharge(t *testing.T, newStore NewStore) {
	kolkata := zone(t, "Asia/Kolkata")
	lim := must(t)(limiter.NewFixedWindow(limiter.FixedWindowParams{Limit: 5, Calendar: limiter.CalendarMonth, TimeZone: kolkata}))
	l := mustNew(t, newStore(t), "calendar-charge", lim)
	ctx := context.Background()
	reserved := time.Date(2024, 2, 29, 23, 0, 0, 0, kolkata)
	march := time.Date(2024, 3, 1, 0, 0, 0, 0, kolkata)
	steps := []struct {
		charge    bool
		at        time.Time
		n         int64
		remaining int64
	}{
		{false, reserved, 3, 2},
		{true, reserved.Add(59 * time.Minute), -2, 4}, // February's: given back
		{false, reserved, 1, 3},
		{false, march, 2, 3},
		{true, march.Add(time.Second), -2, 3}, // March's count is not February's: none given
		{false, march.Add(time.Second), 3, 0},
	}
	for i, s := range steps {
		var d limiter.Decision
		var err error
		if s.charge {
			d, err = l.Charge(ctx, "k", s.at, reserved, s.n)
		} else {
			d, err = l.Allow(ctx, "k", s.at, s.n)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Remaining != s.remaining {
			t.Errorf("step %d (charge %v, %d at %v): %+v, want %d left", i, s.charge, s.n, s.at, d, s.remaining)
		}
	}
}

// calModel is a calendar window written plainly: a request counts in the
// period of its local date (a label that grows with the date), and the
// period ends at the first instant whose label is greater, found by
// bisection. Traces never go backwards.
type calModel struct {
	unit   limiter.Calendar
	loc    *time.Location
	limit  int64
	counts map[int]int64
}

// label numbers t's period so that later periods have greater labels:
// the date, the ISO week (year, week), the month or the year.
func (m *calModel) label(t int64) int {
	at := time.Unix(0, t).In(m.loc)
	switch m.unit {
	case limiter.CalendarWeek:
		y, w := at.ISOWeek()
		return y*100 + w
	case limiter.CalendarMonth:
		return at.Year()*100 + int(at.Month())
	case limiter.CalendarYear:
		return at.Year()
	}
	y, mo, d := at.Date()
	return y*10000 + int(mo)*100 + d
}

// end returns the first instant after now in a later period.
func (m *calModel) end(now int64) int64 {
	l := m.label(now)
	lo, hi := now, now+int64(400*24*time.Hour)
	for lo+1 < hi { // label(lo) == l < label(hi)
		mid := lo + (hi-lo)/2
		if m.label(mid) > l {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

func (m *calModel) allow(now int64) result {
	if m.counts == nil {
		m.counts = map[int]int64{}
	}
	l, end := m.label(now), m.end(now)
	var r result
	if m.counts[l]+1 <= m.limit {
		r.allowed = true
		m.counts[l]++
	} else {
		r.retry = time.Duration(end - now)
	}
	r.remaining = m.limit - m.counts[l]
	if m.counts[l] > 0 {
		r.next = time.Duration(end - now)
	}
	return r
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func instant(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}
