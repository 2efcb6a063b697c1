package driver

import (
	"fmt"
	"strconv"
	"time"
)

// FixedWindowParams configures a fixed window (docs/algorithms.md): time
// is cut into windows of length Window aligned to the Unix epoch (window k
// is [k·Window, (k+1)·Window)), or, with Calendar, into the days, weeks,
// months or years of the time zone TimeZone (calendar.go says where each
// starts); at most Limit units are admitted per window, and a rejected
// request's RetryAfter is the time to the next window, to its real start.
// Memory: 16 bytes of state per key. The zero value is not valid.
type FixedWindowParams struct {
	Limit  int64         // units per window, 1..MaxWindowLimit
	Window time.Duration // must be positive, or 0 with Calendar
	// Calendar, if not zero, makes the windows calendar periods rather
	// than lengths of Window (which must then be 0).
	Calendar Calendar
	// TimeZone is the zone of Calendar's periods; nil means UTC. Only
	// with Calendar.
	TimeZone *time.Location
	Cost     int64 // units per request of weight 1; 0 means 1; at most Limit
}

// fixedWindow is FixedWindowParams compiled: its windows are a grid, and
// every window boundary the steps use comes from it.
type fixedWindow struct {
	FixedWindowParams
	// windows cuts time into the windows counted in: an epochGrid of
	// Window, or a *calendarGrid.
	windows grid
}

// NewFixedWindow validates p and returns the limit, or a *ParamError.
func NewFixedWindow(p FixedWindowParams) (Limit, error) {
	if err := checkCount(FixedWindow, "limit", p.Limit, MaxWindowLimit); err != nil {
		return Limit{}, err
	}
	var windows grid
	switch {
	case p.Calendar == 0:
		if err := checkWindow(FixedWindow, p.Window); err != nil {
			return Limit{}, err
		}
		if p.TimeZone != nil {
			return Limit{}, paramErr(FixedWindow, "time_zone", "applies to a calendar window (window = \"day\", \"week\", \"month\" or \"year\"); a window of a length is aligned to the Unix epoch")
		}
		windows = epochGrid(p.Window)
	case !p.Calendar.Valid():
		return Limit{}, paramErr(FixedWindow, "window", "calendar unit %d is not day, week, month or year", p.Calendar)
	case p.Window != 0:
		return Limit{}, paramErr(FixedWindow, "window", "both a calendar unit (%v) and a length (%v)", p.Calendar, p.Window)
	default:
		windows = newCalendarGrid(p.Calendar, p.TimeZone)
	}
	cost, err := checkCost(FixedWindow, p.Cost, p.Limit, "limit")
	if err != nil {
		return Limit{}, err
	}
	p.Cost = cost
	return Limit{alg: FixedWindow, cost: cost, a: &fixedWindow{p, windows}}, nil
}

func (*fixedWindow) name() string { return "fixed_window" }

func (*fixedWindow) keys() (takes, requires []string) {
	return []string{"limit", "window", "time_zone", "cost"}, []string{"limit", "window"}
}

func (*fixedWindow) build(s Spec) (Limit, error) {
	return NewFixedWindow(FixedWindowParams{Limit: s.Limit, Window: s.Window, Calendar: s.Calendar, TimeZone: s.TimeZone, Cost: s.Cost})
}

func (f *fixedWindow) params() any { return f.FixedWindowParams }

// quota: a calendar window's length varies; its nominal one.
func (f *fixedWindow) quota() (int64, time.Duration) {
	if f.Calendar != 0 {
		return f.Limit, f.Calendar.Nominal()
	}
	return f.Limit, f.Window
}

func (f *fixedWindow) calendar() (Calendar, *time.Location) {
	if f.Calendar == 0 {
		return 0, nil
	}
	return f.Calendar, zoneOf(f.TimeZone)
}

func (f *fixedWindow) describe() string {
	if f.Calendar != 0 {
		return fmt.Sprintf("limit=%d window=%v time_zone=%v", f.Limit, f.Calendar, zoneOf(f.TimeZone))
	}
	return fmt.Sprintf("limit=%d window=%v", f.Limit, f.Window)
}

// stateName: a count means nothing on another grid, and a calendar
// window's numbers mean other periods in another zone.
func (f *fixedWindow) stateName() string {
	if f.Calendar != 0 {
		return "/" + f.Calendar.String() + "@" + zoneOf(f.TimeZone).String()
	}
	return "/" + strconv.FormatInt(int64(f.Window), 10)
}

func (f *fixedWindow) scaled(s float64) (Limit, error) {
	p := f.FixedWindowParams
	p.Limit = scaleCount(p.Limit, s, MaxWindowLimit)
	return NewFixedWindow(p)
}

// script returns the parameters of fixed_window in decide.lua: limit, the
// window in µs (0 for a calendar window, whose bounds scriptGrid gives
// with each decision), and cost.
func (f *fixedWindow) script() ([5]int64, error) {
	if f.Calendar != 0 {
		return [5]int64{f.Limit, 0, f.Cost}, nil
	}
	w, err := scriptMicros(FixedWindow, f.Window, "window", "window")
	if err != nil {
		return [5]int64{}, err
	}
	return [5]int64{f.Limit, w, f.Cost}, nil
}

// scriptGrid returns, for a calendar window, the number k of the window
// holding now and, in µs, the starts of windows k−1, k and k+1 and the
// end of k+1: decide.lua cannot read a zone's rules, and picks among
// these the window of the instant it decides at (Redis's clock, which may
// differ a little from now). Calendar bounds are whole seconds, so exact
// in µs.
func (f *fixedWindow) scriptGrid(now time.Time) ([5]int64, bool) {
	if f.Calendar == 0 {
		return [5]int64{}, false
	}
	k := f.windows.index(nanos(now))
	b0, b1 := f.windows.bounds(k - 1)
	_, b2 := f.windows.bounds(k)
	_, b3 := f.windows.bounds(k + 1)
	us := func(ns int64) int64 { return floorDiv(ns, int64(time.Microsecond)) }
	return [5]int64{k, us(b0), us(b1), us(b2), us(b3)}, true
}

// fixedWindowState is a fixed window's state of one key: 16 bytes. Its
// zero value is a fresh key.
type fixedWindowState struct {
	window int64 // number of the window count belongs to
	count  int64 // units admitted in that window; 0 means fresh
}

func (f *fixedWindow) newStates(n int) States { return make(array[fixedWindowState], n) }

// idleAt is when s stops counting: the end of its window.
func (f *fixedWindow) idleAt(st States, i int, _ *Queue) time.Time {
	var fresh fixedWindowState
	s := stateAt(st, i, &fresh)
	if s.count == 0 {
		return time.Time{}
	}
	_, end := f.windows.bounds(s.window)
	return instant(end)
}

// current returns the window a request at t counts in and that window's
// count: t's own window, or, if s has seen a later one (time going
// backwards), that one, so that a window never reopens. A count of zero
// is a fresh key whatever its window says.
func (f *fixedWindow) current(s *fixedWindowState, t int64) (window, count int64) {
	window = f.windows.index(t)
	if s.count > 0 && s.window >= window {
		return s.window, s.count
	}
	return window, 0
}

// step applies a request of weight n at now to state i of st (st nil: a
// fresh key's); with commit false it only reads. An instant in a window earlier than the one s has seen
// counts in that later window, so going back in time never reopens a
// window. Retry-After is the time to the next window.
//
// Memory: 16 bytes per key. The caller must serialise calls on one state.
func (f *fixedWindow) step(st States, i int, _ *Queue, now time.Time, n int64, commit bool) (d Decision) {
	var fresh fixedWindowState
	s := stateAt(st, i, &fresh)
	c, ok := weighted(n, f.Cost, f.Limit)
	if !ok {
		return never(f.Limit)
	}
	t := nanos(now)
	idx, count := f.current(s, t)
	_, end := f.windows.bounds(idx) // idx's start ≤ an instant seen: no overflow

	d = Decision{Limit: f.Limit}
	if count+c <= f.Limit {
		d.Allowed = true
		count += c
		if commit {
			s.window, s.count = idx, count
		}
	} else {
		// From the caller's instant: if time went backwards, the wait is
		// correspondingly longer, never shorter.
		d.RetryAfter = time.Duration(end - t)
	}
	d.Remaining = max(0, f.Limit-count) // a count in debt (Charge) leaves none
	d.ResetAt = now
	if count > 0 {
		d.ResetAt = instant(end)
		d.Next = time.Duration(end - t)
	}
	return d
}

// charge charges (n > 0) or refunds (n < 0) n units to state i of st at
// now, for a request reserved at reservedAt, unconditionally, and returns
// the state's decision after it (see Charger): never refused. The limit's
// Cost is not applied.
//
// A charge counts in the current window (the one Decide would count a
// request at now in), even past Limit: the rest of that window is then
// rejected, and the next window starts fresh as always, so the debt lasts
// no longer than the window. The count stays at most 2·Limit; the units
// beyond are reported as capped. While the reservation's window lasts,
// that is the window charged, so the reconcile is exact; once it has
// ended, the units count in the current window rather than in one that no
// longer counts, so that an answer longer than a window still pays.
//
// A refund takes units back (down to zero) only while the reservation's
// window is the current one: after it has ended its count no longer
// counts, and taking the units from the current window would admit
// requests nobody paid for. An instant in a window earlier than the
// newest the state has seen (time going backwards) refunds nothing.
func (f *fixedWindow) charge(st States, i int, now, reservedAt time.Time, n int64) Decision {
	var fresh fixedWindowState
	s := stateAt(st, i, &fresh)
	u := chargeUnits(n, 2*f.Limit+1)
	t := nanos(now)
	idx, count := f.current(s, t)
	capped := false
	switch {
	case n > 0:
		take := min(u, max(0, 2*f.Limit-count))
		s.window, s.count = idx, count+take
		capped = take < u
	case n < 0:
		if count > 0 && f.windows.index(min(nanos(reservedAt), t)) == idx {
			s.count = count - min(count, u)
		}
	}
	return chargeReport(f.step(st, i, nil, now, 0, false), capped)
}

// grid cuts time into windows numbered in order: window k holds the
// instants from its start up to its end, excluded, and the next window
// starts where it ends. Every window boundary the fixed window uses comes
// from these two methods, so that another way of cutting time (the
// calendar periods of a time zone: calendarGrid, calendar.go) is one more
// grid, and the steps stay as they are. Instants are Unix nanoseconds.
type grid interface {
	// index returns the number of the window holding instant t.
	index(t int64) int64
	// bounds returns when window k starts and ends, the end saturating at
	// the largest instant.
	bounds(k int64) (start, end int64)
}

var _ grid = epochGrid(1)

// epochGrid cuts time into windows of one length, in nanoseconds, aligned
// to the Unix epoch: window k is [k·length, (k+1)·length). The fixed
// window counts in one; the sliding window's slots are one.
type epochGrid int64

// index uses floorDiv, not /, so that instants before the epoch fall in
// the right window too.
func (g epochGrid) index(t int64) int64 { return floorDiv(t, int64(g)) }

func (g epochGrid) bounds(k int64) (start, end int64) {
	start = k * int64(g)
	return start, satAdd(start, int64(g))
}
