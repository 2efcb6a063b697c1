package driver

import (
	"archive/zip"
	"encoding/binary"
	"math"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(t testing.TB, s string) int64 {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at.UnixNano()
}

// TestCalendarGrid: the windows of an instant in zones whose days are
// not 24 hours, written out by hand from the zone database (zdump -v):
// the start is the first instant of the period's first date, the end the
// next period's start.
func TestCalendarGrid(t *testing.T) {
	for _, c := range []struct {
		zone       string
		unit       Calendar
		at         string // UTC
		start, end string // UTC
	}{
		// Clocks forward at 02:00 CET: a day of 23 hours.
		{"Europe/Berlin", CalendarDay, "2026-03-29T10:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		// Back at 03:00 CEST: 25 hours.
		{"Europe/Berlin", CalendarDay, "2026-10-25T12:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"},
		// Midnight skipped (00:00 −03 → 01:00 −02): the day starts at 01:00.
		{"America/Sao_Paulo", CalendarDay, "2018-11-04T12:00:00Z", "2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"},
		{"America/Sao_Paulo", CalendarDay, "2018-11-04T02:59:59Z", "2018-11-03T03:00:00Z", "2018-11-04T03:00:00Z"},
		// 2011-12-30 skipped: the 29th ends where the 31st starts.
		{"Pacific/Apia", CalendarDay, "2011-12-30T09:59:59Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
		{"Pacific/Apia", CalendarDay, "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z"},
		// Its ISO week, Monday 26th to Sunday 1st, is six days.
		{"Pacific/Apia", CalendarWeek, "2011-12-30T10:00:00Z", "2011-12-26T10:00:00Z", "2012-01-01T10:00:00Z"},
		// Kiritimati's 1994 ends after 1994-12-30.
		{"Pacific/Kiritimati", CalendarYear, "1994-12-31T09:59:59Z", "1994-01-01T10:00:00Z", "1994-12-31T10:00:00Z"},
		// A week of 167 hours, at +12:45 and +13:45.
		{"Pacific/Chatham", CalendarWeek, "2024-09-29T09:00:00Z", "2024-09-22T11:15:00Z", "2024-09-29T10:15:00Z"},
		// Leap February at +05:30.
		{"Asia/Kolkata", CalendarMonth, "2024-02-29T06:30:00Z", "2024-01-31T18:30:00Z", "2024-02-29T18:30:00Z"},
		// New York's 2026 still, though UTC is in 2027.
		{"America/New_York", CalendarYear, "2027-01-01T04:30:00Z", "2026-01-01T05:00:00Z", "2027-01-01T05:00:00Z"},
		// An ISO week across the years.
		{"UTC", CalendarWeek, "2025-01-01T00:00:00Z", "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z"},
		// Sitka when Alaska changed hands: 1867-10-19 15:30 became the
		// 18th again; the 19th's window runs until the 20th, 48 hours.
		{"America/Sitka", CalendarDay, "1867-10-19T01:31:13Z", "1867-10-18T09:01:13Z", "1867-10-20T09:01:13Z"},
		// The end of a leap year past the zone's listed changes, where
		// Time.ZoneBounds reports a period ending before the instant
		// (golang/go#81583).
		{"Europe/London", CalendarYear, "2040-06-01T00:00:00Z", "2040-01-01T00:00:00Z", "2041-01-01T00:00:00Z"},
		{"Europe/London", CalendarDay, "2041-01-01T00:00:00Z", "2041-01-01T00:00:00Z", "2041-01-02T00:00:00Z"},
		{"Australia/Sydney", CalendarDay, "2040-12-31T12:59:59Z", "2040-12-30T13:00:00Z", "2040-12-31T13:00:00Z"},
		{"America/New_York", CalendarMonth, "2040-12-31T12:00:00Z", "2040-12-01T05:00:00Z", "2041-01-01T05:00:00Z"},
	} {
		g := newCalendarGrid(c.unit, mustZone(t, c.zone))
		at := utc(t, c.at)
		k := g.index(at)
		start, end := g.bounds(k)
		if start != utc(t, c.start) || end != utc(t, c.end) {
			t.Errorf("%s %v at %s: window %d [%v, %v), want [%s, %s)", c.zone, c.unit, c.at, k,
				time.Unix(0, start).UTC().Format(time.RFC3339), time.Unix(0, end).UTC().Format(time.RFC3339), c.start, c.end)
		}
		// Cached or not, the same answer; the neighbours touch.
		g2 := newCalendarGrid(c.unit, mustZone(t, c.zone))
		if s2, e2 := g2.bounds(k); s2 != start || e2 != end {
			t.Errorf("%s %v: bounds(%d) uncached [%d, %d), cached [%d, %d)", c.zone, c.unit, k, s2, e2, start, end)
		}
		if _, e := g.bounds(k - 1); e != start {
			t.Errorf("%s %v: window %d ends at %d, not where %d starts (%d)", c.zone, c.unit, k-1, e, k, start)
		}
	}
}

// TestCalendarNumbers: the windows are numbered from the period holding
// 1970-01-01 (for a week, Monday 1969-12-29), before it too.
func TestCalendarNumbers(t *testing.T) {
	for _, c := range []struct {
		unit Calendar
		at   string
		k    int64
	}{
		{CalendarDay, "1970-01-01T00:00:00Z", 0}, {CalendarDay, "1969-12-31T23:59:59Z", -1}, {CalendarDay, "1970-01-02T00:00:00Z", 1},
		{CalendarWeek, "1969-12-29T00:00:00Z", 0}, {CalendarWeek, "1969-12-28T23:59:59Z", -1}, {CalendarWeek, "1970-01-05T00:00:00Z", 1},
		{CalendarMonth, "1970-01-31T23:59:59Z", 0}, {CalendarMonth, "1969-12-01T00:00:00Z", -1}, {CalendarMonth, "1971-02-01T00:00:00Z", 13},
		{CalendarYear, "1970-12-31T23:59:59Z", 0}, {CalendarYear, "1969-01-01T00:00:00Z", -1}, {CalendarYear, "2026-06-01T00:00:00Z", 56},
	} {
		if k := newCalendarGrid(c.unit, nil).index(utc(t, c.at)); k != c.k {
			t.Errorf("%v at %s: window %d, want %d", c.unit, c.at, k, c.k)
		}
	}
}

// TestCalendarGridEveryZone: in every zone of Go's zone database, at and
// around each of its changes of UTC offset from 1850 to 2040, and at the
// ends of leap years after its listed changes, each unit's
// window of an instant holds it, starts where the one before ends, and
// starts at the first instant whose local date is its first date or
// later: the instant before it shows an earlier date.
func TestCalendarGridEveryZone(t *testing.T) {
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	z, err := zip.OpenReader(filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	date := func(ns int64, loc *time.Location) int {
		y, m, d := time.Unix(0, ns).In(loc).Date()
		return y*10000 + int(m)*100 + d
	}
	checked, zones := 0, 0
	for _, f := range z.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		zones++
		loc := mustZone(t, f.Name)
		grids := []*calendarGrid{newCalendarGrid(CalendarDay, loc), newCalendarGrid(CalendarWeek, loc),
			newCalendarGrid(CalendarMonth, loc), newCalendarGrid(CalendarYear, loc)}
		var xs []int64 // instants at and around each change
		at := time.Date(1850, 1, 1, 0, 0, 0, 0, time.UTC)
		for at.Year() < 2040 {
			_, next := at.In(loc).ZoneBounds()
			if next.IsZero() {
				break
			}
			at = next
			for _, dt := range []time.Duration{-25 * time.Hour, -time.Second, 0, 1, time.Hour, 25 * time.Hour} {
				xs = append(xs, at.UnixNano()+int64(dt))
			}
		}
		// The ends of leap years past the listed changes (golang/go#81583).
		for _, y := range []int{2040, 2044, 2048} {
			for _, h := range []int{-13, 0, 12, 24, 37} {
				xs = append(xs, time.Date(y, 12, 31, h, 0, 0, 0, time.UTC).UnixNano())
			}
		}
		for _, x := range xs {
			for _, g := range grids {
				checked++
				g.last.Store(nil) // each instant on its own, as a store's first request would see it
				k := g.index(x)
				start, end := g.bounds(k)
				first := date(g.firstDay(k)*86400*int64(time.Second), time.UTC)
				_, prevEnd := g.bounds(k - 1)
				if !(start <= x && x < end) || prevEnd != start || date(start, loc) < first || date(start-1, loc) >= first {
					t.Fatalf("%s %v at %v: window %d [%v, %v), the one before ends at %v; first date %d",
						f.Name, g.unit, time.Unix(0, x).In(loc), k, time.Unix(0, start).In(loc), time.Unix(0, end).In(loc),
						time.Unix(0, prevEnd).In(loc), first)
				}
			}
		}
	}
	if zones < 300 || checked < 100_000 {
		t.Fatalf("checked %d windows in %d zones: the zone database was not read", checked, zones)
	}
}

// TestCalendarGridFooterChange: past a zone's listed changes its TZ
// footer rule applies, and there Time.ZoneBounds reports an end before the
// instant in the last UTC day of a leap year (golang/go#81583); the walk
// then follows the offset over the next day, and finds a change in it
// exactly. The zone (no listed change, only the footer): XST, +01, and
// XDT, +04, from January 1st 01:00 (00:00 UTC) to December 31st 12:00
// (08:00 UTC), so that the footer's period after 2040's change is a
// sliver of 16 hours whose reported end is wrong.
func TestCalendarGridFooterChange(t *testing.T) {
	loc, err := time.LoadLocationFromTZData("Test/Footer", tzif("XST-1XDT-4,J1/1,J365/12"))
	if err != nil {
		t.Fatal(err)
	}
	if _, off := time.Date(2041, 1, 1, 1, 0, 0, 0, time.UTC).In(loc).Zone(); off != 4*3600 {
		t.Fatalf("the test zone's offset on 2041-01-01 is %d, not +04: the TZif data was not read as meant", off)
	}
	for _, c := range []struct{ at, start, end string }{
		// 2041-01-01 starts at 00:00 +01 and is 20 hours long: at 01:00
		// +01 it is 04:00 +04.
		{"2041-01-01T12:00:00Z", "2040-12-31T23:00:00Z", "2041-01-01T20:00:00Z"},
		{"2041-01-01T20:00:00Z", "2041-01-01T20:00:00Z", "2041-01-02T20:00:00Z"},
		{"2040-12-31T12:00:00Z", "2040-12-30T20:00:00Z", "2040-12-31T23:00:00Z"},
	} {
		g := newCalendarGrid(CalendarDay, loc)
		start, end := g.bounds(g.index(utc(t, c.at)))
		if start != utc(t, c.start) || end != utc(t, c.end) {
			t.Errorf("at %s: [%v, %v), want [%s, %s)", c.at, time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), c.start, c.end)
		}
	}
}

// tzif returns a zone in the TZif format (RFC 8536, version 2) with no
// listed change, of offset +01 until its footer, the POSIX TZ rule footer,
// applies.
func tzif(footer string) []byte {
	var b []byte
	block := func() {
		b = append(b, "TZif2"...)
		b = append(b, make([]byte, 15)...)
		for _, n := range []uint32{0, 0, 0, 0, 1, 4} { // isutcnt isstdcnt leapcnt timecnt typecnt charcnt
			b = binary.BigEndian.AppendUint32(b, n)
		}
		b = binary.BigEndian.AppendUint32(b, 3600) // the one type: +01, not DST, "XST"
		b = append(b, 0, 0)
		b = append(b, "XST\x00"...)
	}
	block() // version 1's
	block() // version 2's (its times would be 64-bit; it has none)
	return append(b, "\n"+footer+"\n"...)
}

// TestCalendarGridEnds: instants near the ends of int64 time have windows
// that hold them, saturating rather than wrapping.
func TestCalendarGridEnds(t *testing.T) {
	for _, unit := range []Calendar{CalendarDay, CalendarWeek, CalendarMonth, CalendarYear} {
		g := newCalendarGrid(unit, mustZone(t, "Pacific/Chatham"))
		for _, x := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1} {
			k := g.index(x)
			start, end := g.bounds(k)
			// x < end, but at the last instant, where the end saturates.
			if start > x || x > end || x == end && end != math.MaxInt64 {
				t.Errorf("%v at %d: window %d [%d, %d)", unit, x, k, start, end)
			}
		}
		if s, e := g.bounds(1 << 62); s != math.MaxInt64 || e != math.MaxInt64 {
			t.Errorf("%v: a window past int64 time is [%d, %d), want saturated", unit, s, e)
		}
		if s, e := g.bounds(-1 << 62); s != math.MinInt64 || e != math.MinInt64 {
			t.Errorf("%v: a window before int64 time is [%d, %d), want saturated", unit, s, e)
		}
	}
}

// TestCalendarParse: the unit names, both ways, and their nominal
// lengths.
func TestCalendarParse(t *testing.T) {
	for _, c := range []struct {
		name    string
		unit    Calendar
		nominal time.Duration
	}{
		{"day", CalendarDay, 86400 * time.Second}, {"week", CalendarWeek, 604800 * time.Second},
		{"month", CalendarMonth, 2629746 * time.Second}, {"year", CalendarYear, 31556952 * time.Second},
	} {
		if u, ok := ParseCalendar(c.name); !ok || u != c.unit || u.String() != c.name || !u.Valid() || u.Nominal() != c.nominal {
			t.Errorf("ParseCalendar(%q) = %v %v, nominal %v", c.name, u, ok, u.Nominal())
		}
	}
	for _, s := range []string{"", "days", "Month", "1d", "fortnight"} {
		if u, ok := ParseCalendar(s); ok || u != 0 {
			t.Errorf("ParseCalendar(%q) = %v, %v", s, u, ok)
		}
	}
	if Calendar(0).Valid() || Calendar(5).Valid() || Calendar(5).String() != "" || Calendar(0).Nominal() != 0 {
		t.Error("a Calendar that is not a unit passes for one")
	}
}

// TestCalendarWindowSteps: a fixed window of 2 a day in Berlin across the
// night the clocks go forward: the day is 23 hours, Retry-After, Next and
// ResetAt count to its real end, the count starts again there, an
// instant back in the day before counts in the newest day, and the state
// is idle at the day's end.
func TestCalendarWindowSteps(t *testing.T) {
	must := mustLimit(t)
	berlin := mustZone(t, "Europe/Berlin")
	l := must(NewFixedWindow(FixedWindowParams{Limit: 2, Calendar: CalendarDay, TimeZone: berlin}))
	k := newKey(l)
	day := time.Date(2026, 3, 29, 0, 0, 0, 0, berlin) // 23:00 UTC the day before
	end := day.Add(23 * time.Hour)
	at := day.Add(30 * time.Minute)
	for i, want := range []bool{true, true, false} {
		d := k.step(at, 1)
		if d.Allowed != want || d.Remaining != int64(1-i) && want || !d.ResetAt.Equal(end) || d.Next != end.Sub(at) {
			t.Fatalf("step %d at %v: %+v, want allowed %v, reset %v", i, at, d, want, end)
		}
		if !want && d.RetryAfter != end.Sub(at) {
			t.Fatalf("rejected at %v: Retry-After %v, want %v (22h30m: the day has 23 hours)", at, d.RetryAfter, end.Sub(at))
		}
	}
	if !k.idleAt().Equal(end) {
		t.Errorf("idle at %v, want the day's end %v", k.idleAt(), end)
	}
	// Going back into the day before counts in this one.
	if d := k.step(day.Add(-time.Hour), 1); d.Allowed || d.RetryAfter != end.Sub(day.Add(-time.Hour)) {
		t.Errorf("an hour before the day: %+v, want rejected until the day's end", d)
	}
	if d := k.step(end.Add(-1), 1); d.Allowed || d.RetryAfter != 1 {
		t.Errorf("a nanosecond before the end: %+v, want rejected for 1ns", d)
	}
	next := time.Date(2026, 3, 31, 0, 0, 0, 0, berlin) // the 30th ends
	if d := k.step(end, 1); !d.Allowed || d.Remaining != 1 || !d.ResetAt.Equal(next) || d.Next != 24*time.Hour {
		t.Errorf("at the day's end: %+v, want a fresh day of 24 hours ending at %v", d, next)
	}
}

// TestCalendarWindowCharge: a refund applies while the reservation's
// calendar day is the current one, not after it has ended.
func TestCalendarWindowCharge(t *testing.T) {
	must := mustLimit(t)
	kolkata := mustZone(t, "Asia/Kolkata")
	l := must(NewFixedWindow(FixedWindowParams{Limit: 5, Calendar: CalendarMonth, TimeZone: kolkata}))
	k := newKey(l)
	reserved := time.Date(2024, 2, 29, 23, 0, 0, 0, kolkata)
	k.step(reserved, 3)
	if d := k.charge(reserved.Add(59*time.Minute), reserved, -2); d.Remaining != 4 {
		t.Errorf("refund within February: %+v, want 4 left", d)
	}
	k.step(reserved, 1)
	march := time.Date(2024, 3, 1, 0, 0, 0, 0, kolkata)
	if d := k.charge(march, reserved, -2); d.Remaining != 5 || !d.ResetAt.Equal(march) {
		t.Errorf("refund in March of a February reservation: %+v, want a fresh month", d)
	}
	if d := k.step(march.Add(-1), 5); d.Allowed {
		t.Errorf("February's count after a refund in March: %+v, want its 2 still counted (back in time counts in March)", d)
	}
}

// TestCalendarWindowParams: what a calendar window is, says and
// refuses.
func TestCalendarWindowParams(t *testing.T) {
	must := mustLimit(t)
	ny := mustZone(t, "America/New_York")
	l := must(NewLimit(Spec{Algorithm: FixedWindow, Limit: 100, Calendar: CalendarMonth, TimeZone: ny, Cost: 2}))
	if q, w := l.Quota(); q != 100 || w != CalendarMonth.Nominal() {
		t.Errorf("Quota() = %d, %v", q, w)
	}
	if c, loc := l.Calendar(); c != CalendarMonth || loc != ny {
		t.Errorf("Calendar() = %v, %v", c, loc)
	}
	if s := l.String(); s != "fixed_window limit=100 window=month time_zone=America/New_York cost=2" {
		t.Errorf("String() = %q", s)
	}
	if p := l.Params(); p != (FixedWindowParams{Limit: 100, Calendar: CalendarMonth, TimeZone: ny, Cost: 2}) {
		t.Errorf("Params() = %+v", p)
	}
	utcDay := must(NewFixedWindow(FixedWindowParams{Limit: 1, Calendar: CalendarDay}))
	if c, loc := utcDay.Calendar(); c != CalendarDay || loc != time.UTC || utcDay.String() != "fixed_window limit=1 window=day time_zone=UTC" {
		t.Errorf("a calendar day without a zone: %v %v %q, want UTC", c, loc, utcDay.String())
	}
	epoch := must(NewFixedWindow(FixedWindowParams{Limit: 1, Window: 24 * time.Hour}))
	if c, loc := epoch.Calendar(); c != 0 || loc != nil {
		t.Errorf("a window of 24h: Calendar() = %v, %v", c, loc)
	}
	// Their states never mix: another unit or zone is another grid.
	names := map[string]bool{}
	for _, x := range []Limit{l, utcDay, epoch,
		must(NewFixedWindow(FixedWindowParams{Limit: 1, Calendar: CalendarMonth})),
		must(NewFixedWindow(FixedWindowParams{Limit: 1, Calendar: CalendarDay, TimeZone: ny}))} {
		names[StateNames("p", x)[0]] = true
	}
	if len(names) != 5 {
		t.Errorf("state names %v: want 5 different", names)
	}
	if n := StateNames("p", l)[0]; n != "1:p/fixed_window/0/month@America/New_York" {
		t.Errorf("state name %q", n)
	}
	scaled, err := l.Scaled(1.5)
	if err != nil || scaled.Params() != (FixedWindowParams{Limit: 150, Calendar: CalendarMonth, TimeZone: ny, Cost: 2}) {
		t.Errorf("Scaled(1.5) = %+v, %v", scaled.Params(), err)
	}
	for _, c := range []struct {
		spec Spec
		err  string
	}{
		{Spec{Algorithm: SlidingWindow, Limit: 5, Calendar: CalendarDay}, `sliding_window: window: "day" is a calendar window, which only fixed_window counts in; sliding_window takes a length such as "24h"`},
		{Spec{Algorithm: SlidingLog, Limit: 5, Calendar: CalendarYear, TimeZone: ny}, `sliding_log: window: "year" is a calendar window, which only fixed_window counts in; sliding_log takes a length such as "24h"`},
		{Spec{Algorithm: TokenBucket, Rate: Rate{1, time.Second}, Calendar: CalendarWeek}, `token_bucket: window: "week" is a calendar window, which only fixed_window counts in; token_bucket takes a length such as "24h"`},
		{Spec{Algorithm: FixedWindow, Limit: 5, Window: time.Hour, TimeZone: ny}, `fixed_window: time_zone: applies to a calendar window (window = "day", "week", "month" or "year"); a window of a length is aligned to the Unix epoch`},
		{Spec{Algorithm: FixedWindow, Limit: 5, Window: time.Hour, Calendar: CalendarDay}, `fixed_window: window: both a calendar unit (day) and a length (1h0m0s)`},
		{Spec{Algorithm: FixedWindow, Limit: 5, Calendar: 9}, `fixed_window: window: calendar unit 9 is not day, week, month or year`},
		{Spec{Algorithm: FixedWindow, Limit: 5, Calendar: CalendarDay, Cost: 6}, `fixed_window: cost: 6 is above limit 5, so no request could ever be admitted`},
	} {
		if _, err := NewLimit(c.spec); err == nil || err.Error() != c.err {
			t.Errorf("NewLimit(%+v): %v, want %q", c.spec, err, c.err)
		}
	}
}

// TestCalendarScript: a calendar window's script parameters mark it (a
// window of 0 µs) and its grid gives the windows around the instant in
// µs; other limits have no grid.
func TestCalendarScript(t *testing.T) {
	must := mustLimit(t)
	apia := mustZone(t, "Pacific/Apia")
	l := must(NewFixedWindow(FixedWindowParams{Limit: 7, Calendar: CalendarDay, TimeZone: apia, Cost: 2}))
	if p, err := l.ScriptParams(); err != nil || p != [6]int64{int64(FixedWindow), 7, 0, 2, 0, 0} {
		t.Errorf("ScriptParams() = %v, %v", p, err)
	}
	// The 29th, then the 31st: the 30th was skipped, an empty window.
	at := time.Date(2011, 12, 29, 12, 0, 0, 0, apia)
	g, ok := l.ScriptGrid(at)
	us := func(s string) int64 { return utc(t, s) / 1000 }
	want := [5]int64{l.a.(*fixedWindow).windows.index(nanos(at)),
		us("2011-12-28T10:00:00Z"), us("2011-12-29T10:00:00Z"), us("2011-12-30T10:00:00Z"), us("2011-12-30T10:00:00Z")}
	if !ok || g != want {
		t.Errorf("ScriptGrid(%v) = %v, %v, want %v", at, g, ok, want)
	}
	if want[0] != civilDay(2011, 12, 29) {
		t.Errorf("window %d, want the day number of 2011-12-29", want[0])
	}
	// The 28th: the 29th after it ends where the 31st starts.
	at = time.Date(2011, 12, 28, 12, 0, 0, 0, apia)
	want = [5]int64{civilDay(2011, 12, 28), us("2011-12-27T10:00:00Z"), us("2011-12-28T10:00:00Z"), us("2011-12-29T10:00:00Z"), us("2011-12-30T10:00:00Z")}
	if g, ok := l.ScriptGrid(at); !ok || g != want {
		t.Errorf("ScriptGrid(%v) = %v, %v, want %v", at, g, ok, want)
	}
	for _, other := range []Limit{must(NewFixedWindow(FixedWindowParams{Limit: 7, Window: time.Hour})),
		must(NewTokenBucket(TokenBucketParams{Rate: Rate{1, time.Second}, Burst: 1}))} {
		if g, ok := other.ScriptGrid(at); ok || g != [5]int64{} {
			t.Errorf("%v: ScriptGrid = %v, %v, want none", other, g, ok)
		}
	}
}

// TestCalendarWindowDeepEqual: two calendar windows built alike in one
// Location are deeply equal, also after one of them has decided (its
// cached window is the other's): a reload compares configurations so,
// and must not see a change that is not there.
func TestCalendarWindowDeepEqual(t *testing.T) {
	must := mustLimit(t)
	loc := mustZone(t, "Europe/Berlin")
	a := must(NewFixedWindow(FixedWindowParams{Limit: 2, Calendar: CalendarMonth, TimeZone: loc}))
	newKey(a).step(time.Date(2026, 3, 29, 12, 0, 0, 0, loc), 1)
	b := must(NewFixedWindow(FixedWindowParams{Limit: 2, Calendar: CalendarMonth, TimeZone: loc}))
	if !reflect.DeepEqual(a, b) {
		t.Error("a calendar window that has decided differs from one built alike")
	}
	if c := must(NewFixedWindow(FixedWindowParams{Limit: 2, Calendar: CalendarWeek, TimeZone: loc})); reflect.DeepEqual(a, c) {
		t.Error("a month and a week compare equal")
	}
}
