package driver

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Calendar is a unit of the calendar that a fixed window can count in
// (FixedWindowParams.Calendar, issue 37): its windows are the days, weeks,
// months or years of a time zone, each from the first instant of its
// first date to the first instant of the next period's, whatever that
// makes its length in seconds (a day with a daylight-saving change is 23
// or 25 hours, a month 28 to 31 days). The zero value is no calendar: a
// window of a fixed length aligned to the Unix epoch.
type Calendar uint8

// The calendar units, with the names the configuration's window takes.
const (
	CalendarDay   Calendar = iota + 1 // "day"
	CalendarWeek                      // "week": ISO 8601 weeks, Monday to Sunday
	CalendarMonth                     // "month"
	CalendarYear                      // "year"
)

var calendarNames = [...]string{CalendarDay: "day", CalendarWeek: "week", CalendarMonth: "month", CalendarYear: "year"}

// Valid reports whether c is one of the calendar units.
func (c Calendar) Valid() bool { return c != 0 && int(c) < len(calendarNames) }

// String returns the configuration's name of c ("month"), "" for the zero
// Calendar.
func (c Calendar) String() string {
	if !c.Valid() {
		return ""
	}
	return calendarNames[c]
}

// ParseCalendar returns the calendar unit the configuration names s
// ("day", "week", "month" or "year"), and false for anything else.
func ParseCalendar(s string) (Calendar, bool) {
	for c := CalendarDay; c.Valid(); c++ {
		if calendarNames[c] == s {
			return c, true
		}
	}
	return 0, false
}

// Nominal returns the usual length of one c: 24 hours, 7 days, and for a
// month and a year their mean lengths over the Gregorian calendar's
// 400-year cycle (30.436875 and 365.2425 days: 2,629,746 and 31,556,952
// seconds, the estimates of Java's ChronoUnit). A window's real length
// varies; Limit.Quota reports this one. 0 for the zero Calendar.
func (c Calendar) Nominal() time.Duration {
	switch c {
	case CalendarDay:
		return 24 * time.Hour
	case CalendarWeek:
		return 7 * 24 * time.Hour
	case CalendarMonth:
		return 2_629_746 * time.Second
	case CalendarYear:
		return 31_556_952 * time.Second
	}
	return 0
}

// calendarGrid cuts time into the periods of unit in the time zone loc
// (a grid: fixedwindow.go). Its windows are numbered from the period
// holding 1970-01-01: day k starts on the date k days after it, week k on
// the Monday 7k−3 days after it (1970-01-01 was a Thursday), month k k
// months after January 1970, year k at 1970+k.
//
// A date starts at its first instant: local midnight, or, where the zone
// skips midnight (a daylight-saving change at 00:00, as America/Havana,
// America/Santiago and America/Sao_Paulo had), the first instant whose
// local date is that date, the change itself. Where midnight comes twice
// (a change from 01:00 back to 00:00) the date starts at the first. A date
// the zone skips altogether (Pacific/Apia's 2011-12-30, when Samoa crossed
// the date line; Pacific/Kiritimati's 1994-12-31) starts where the next
// date does: its day is an empty window that holds no instant, and the
// week, month and year around it are a day shorter. Precisely: period k
// starts at the first instant whose local date is on or after k's first
// date, so windows follow each other in order even in a zone whose local
// date went back (an instant counts in the period of the latest date its
// zone has shown).
//
// The windows come from Go's zone database (time.LoadLocation: the
// system's, else the one built into the binary). It is safe for
// concurrent use: the window last found is cached, in a cache every grid
// of the unit and the *time.Location shares (calendarCaches).
type calendarGrid struct {
	unit Calendar
	loc  *time.Location
	last *atomic.Pointer[calendarWindow]
}

// calendarWindow is one window of a calendarGrid: its number and bounds in
// Unix nanoseconds.
type calendarWindow struct{ k, start, end int64 }

var _ grid = (*calendarGrid)(nil)

func newCalendarGrid(unit Calendar, loc *time.Location) *calendarGrid {
	if loc == nil {
		loc = time.UTC
	}
	return &calendarGrid{unit: unit, loc: loc, last: calendarCache(unit, loc)}
}

// calendarCaches holds, per *time.Location, the window last found for
// each unit, shared by every grid of the unit in that Location. Shared
// rather than each grid's own so that two limits built alike compare
// equal whatever requests they have decided (a reload compares its
// configuration with reflect.DeepEqual, which follows the pointer: the
// same one is equal), and so that a grid rebuilt by a reload starts warm.
// Every distinct Location adds an entry; past maxCalendarCaches the table
// starts again (grids keep the caches they hold).
var calendarCaches struct {
	m sync.Map // *time.Location → *[len(calendarNames)]atomic.Pointer[calendarWindow]
	n atomic.Int64
}

const maxCalendarCaches = 4096

func calendarCache(unit Calendar, loc *time.Location) *atomic.Pointer[calendarWindow] {
	c, ok := calendarCaches.m.Load(loc)
	if !ok {
		if calendarCaches.n.Add(1) > maxCalendarCaches {
			calendarCaches.m.Clear()
			calendarCaches.n.Store(1)
		}
		c, _ = calendarCaches.m.LoadOrStore(loc, new([len(calendarNames)]atomic.Pointer[calendarWindow]))
	}
	return &c.(*[len(calendarNames)]atomic.Pointer[calendarWindow])[unit]
}

// index returns the number of the period holding t: that of t's local
// date, or of a later period whose start t is already past (a date shown
// again after a later one).
func (g *calendarGrid) index(t int64) int64 {
	if w := g.last.Load(); w != nil && w.start <= t && t < w.end {
		return w.k
	}
	y, m, d := time.Unix(0, t).In(g.loc).Date()
	k := g.period(y, m, d)
	// k's first date is on or before t's, so k starts at or before t.
	start, end := g.compute(k)
	for t >= end && end < math.MaxInt64 {
		k++
		start, end = g.compute(k)
	}
	g.last.Store(&calendarWindow{k, start, end})
	return k
}

// bounds returns when period k starts and ends, saturating at the ends of
// int64 time.
func (g *calendarGrid) bounds(k int64) (start, end int64) {
	if w := g.last.Load(); w != nil && w.k == k {
		return w.start, w.end
	}
	return g.compute(k)
}

// maxPeriods bounds the period numbers compute works with: past it every
// bound has saturated (int64 nanoseconds span 292 years either side of
// 1970), and the dates computed from it stay far from overflowing.
const maxPeriods = 1_000_000

func (g *calendarGrid) compute(k int64) (start, end int64) {
	k = max(-maxPeriods, min(k, maxPeriods))
	return g.dayStart(g.firstDay(k)), g.dayStart(g.firstDay(k + 1))
}

// period returns the number of the period holding the date y-m-d.
func (g *calendarGrid) period(y int, m time.Month, d int) int64 {
	switch g.unit {
	case CalendarWeek:
		return floorDiv(civilDay(y, m, d)+3, 7)
	case CalendarMonth:
		return int64(y-1970)*12 + int64(m) - 1
	case CalendarYear:
		return int64(y - 1970)
	}
	return civilDay(y, m, d)
}

// firstDay returns the first date of period k, in days since 1970-01-01.
func (g *calendarGrid) firstDay(k int64) int64 {
	switch g.unit {
	case CalendarWeek:
		return 7*k - 3
	case CalendarMonth:
		return civilDay(1970+int(floorDiv(k, 12)), time.Month(mod(k, 12)+1), 1)
	case CalendarYear:
		return civilDay(1970+int(k), time.January, 1)
	}
	return k
}

// civilDay returns the date y-m-d in days since 1970-01-01.
func civilDay(y int, m time.Month, d int) int64 {
	// Midnight UTC is a whole number of days from the epoch.
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// maxDay is the last date whose start int64 nanoseconds can hold, give or
// take a day: past it dayStart saturates.
const maxDay = math.MaxInt64/(86400*int64(time.Second)) + 1

// dayStart returns the first instant, in Unix nanoseconds, whose local
// date in g's zone is day (days since 1970-01-01) or later. It walks the
// zone's periods of one UTC offset (Time.ZoneBounds) from a day and more
// before: in a period of offset o the local date reaches day at the
// instant day·86400 s − o, if the period holds it, else at the period's
// start if that is past it (a change that skipped midnight, or the date).
func (g *calendarGrid) dayStart(day int64) int64 {
	switch {
	case day > maxDay:
		return math.MaxInt64
	case day < -maxDay:
		return math.MinInt64
	}
	midnight := day * 86400 // the date's local midnight, in seconds, as if in UTC
	// UTC offsets stay within ±16 h (the zone database's extremes are
	// local mean times of about 15:56), so 26 h before, the local date is
	// still an earlier one.
	t := midnight - 26*3600
	for range 64 { // a few periods at most in real zone data
		offset := g.offset(t)
		c := max(t, midnight-offset)
		end, forever := g.periodEnd(t, offset)
		if forever || c < end {
			return secondsNanos(c)
		}
		t = end
	}
	return secondsNanos(t)
}

// offset returns the UTC offset in g's zone at Unix second t, in seconds.
func (g *calendarGrid) offset(t int64) int64 {
	_, offset := time.Unix(t, 0).In(g.loc).Zone()
	return int64(offset)
}

// periodEnd returns when the zone's period holding Unix second t, of UTC
// offset offset, ends (a second), or forever if it never does: what
// Time.ZoneBounds reports, unless that is not after t. It can be
// (golang/go#81583): in the last UTC day of a leap year served by a
// zone's TZ footer rule (after its last listed change) ZoneBounds reports
// an end 365 days after the year's start, a day early, before the
// instant asked about. Then the offset is followed over the next day
// instead: its first change there, found by bisection, or the day's end,
// from where the walk asks ZoneBounds again.
func (g *calendarGrid) periodEnd(t, offset int64) (end int64, forever bool) {
	_, e := time.Unix(t, 0).In(g.loc).ZoneBounds()
	switch {
	case e.IsZero():
		return 0, true
	case e.Unix() > t:
		return e.Unix(), false
	}
	lo, hi := t, t+86400
	if g.offset(hi) == offset {
		return hi, false
	}
	for lo+1 < hi { // offset(lo) == offset != offset(hi)
		mid := lo + (hi-lo)/2
		if g.offset(mid) == offset {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, false
}

// secondsNanos returns s seconds in nanoseconds, saturating at the ends
// of int64.
func secondsNanos(s int64) int64 {
	switch {
	case s > math.MaxInt64/int64(time.Second):
		return math.MaxInt64
	case s < math.MinInt64/int64(time.Second):
		return math.MinInt64
	}
	return s * int64(time.Second)
}

// zoneOf returns loc, or UTC for nil.
func zoneOf(loc *time.Location) *time.Location {
	if loc == nil {
		return time.UTC
	}
	return loc
}
