package driver

import (
	"fmt"
	"strconv"
	"time"
)

// SlidingWindowParams configures a sliding window counter (docs/algorithms.md). The
// window is cut into Slots slots of Window/Slots, aligned to the Unix epoch.
// At instant t in slot j, the estimate of the units admitted in (t−Window, t]
// is the sum of slots j−Slots+1 … j (wholly inside the window, or holding
// only instants ≤ t) plus slot j−Slots weighted by the fraction of it still
// inside, ((j+1)·L − t)/L for slot length L. A request of cost c is admitted
// iff estimate + c ≤ Limit. Slots = 1 is the classic two-window
// approximation; more slots track the exact sliding log more closely.
//
// The approximation bound: the estimate weighs the oldest slot as if its
// units were spread evenly across it, so the units admitted in a window of
// length Window exceed Limit by at most the part of that one slot's count
// the weight discounted. On perfectly even traffic that is nothing
// (TestSlidingWindowSteadyOverLimit: never more than Limit in any window at
// 10× overload, for 1 and 6 slots); on random (Poisson) arrivals at 1.5×
// the limit, a few percent in the worst window (bench/accuracy: 610 and 617
// of 600 for 1 and 6 slots over two hours). The worst case is a burst at the very
// end of a slot that then becomes the oldest: up to that slot's count more,
// which is at most Limit (so 2×Limit), as for every sliding window counter.
// A weighting by age over the whole window, as some published examples
// use, admits about 3×Limit on steady traffic instead.
//
// Memory: 8 + 4·(Slots+1) bytes of state per key (16 for Slots = 1). The
// zero value is not valid.
type SlidingWindowParams struct {
	Limit  int64         // units per window, 1..MaxCount
	Window time.Duration // must be positive and a whole multiple of Slots nanoseconds
	Slots  int           // 1..MaxSlots
	Cost   int64         // units per request of weight 1; 0 means 1; at most Limit
}

// slidingWindow is SlidingWindowParams compiled.
type slidingWindow struct {
	SlidingWindowParams
	slot  int64     // slot length L in ns
	slots epochGrid // the slots: every slot boundary comes from it
}

// NewSlidingWindow validates p and returns the limit, or a *ParamError.
func NewSlidingWindow(p SlidingWindowParams) (Limit, error) {
	if err := checkCount(SlidingWindow, "limit", p.Limit, MaxCount); err != nil {
		return Limit{}, err
	}
	if err := checkWindow(SlidingWindow, p.Window); err != nil {
		return Limit{}, err
	}
	switch {
	case p.Slots < 1:
		return Limit{}, paramErr(SlidingWindow, "slots", "must be at least 1 (1 is the two-window approximation)")
	case p.Slots > MaxSlots:
		return Limit{}, paramErr(SlidingWindow, "slots", "%d is above the maximum of %d", p.Slots, MaxSlots)
	case int64(p.Window)%int64(p.Slots) != 0:
		return Limit{}, paramErr(SlidingWindow, "slots", "window %v does not divide into %d equal slots", p.Window, p.Slots)
	}
	cost, err := checkCost(SlidingWindow, p.Cost, p.Limit, "limit")
	if err != nil {
		return Limit{}, err
	}
	p.Cost = cost
	slot := int64(p.Window) / int64(p.Slots)
	return Limit{alg: SlidingWindow, cost: cost, a: &slidingWindow{p, slot, epochGrid(slot)}}, nil
}

func (*slidingWindow) name() string { return "sliding_window" }

func (*slidingWindow) keys() (takes, requires []string) {
	return []string{"limit", "window", "slots", "cost"}, []string{"limit", "window"}
}

// build defaults slots to 1, the two-window approximation.
func (*slidingWindow) build(s Spec) (Limit, error) {
	slots := s.Slots
	if s.unset("slots", slots) {
		slots = 1
	}
	// An int holds every valid count; a larger one stays out of range.
	return NewSlidingWindow(SlidingWindowParams{Limit: s.Limit, Window: s.Window, Slots: int(min(slots, MaxSlots+1)), Cost: s.Cost})
}

func (w *slidingWindow) params() any { return w.SlidingWindowParams }

func (w *slidingWindow) quota() (int64, time.Duration) { return w.Limit, w.Window }

func (w *slidingWindow) describe() string {
	return fmt.Sprintf("limit=%d window=%v slots=%d", w.Limit, w.Window, w.Slots)
}

// stateName: counts mean nothing on another grid of slots.
func (w *slidingWindow) stateName() string {
	return "/" + strconv.FormatInt(int64(w.Window), 10) + "/" + strconv.Itoa(w.Slots)
}

func (w *slidingWindow) scaled(s float64) (Limit, error) {
	p := w.SlidingWindowParams
	p.Limit = scaleCount(p.Limit, s, MaxCount)
	return NewSlidingWindow(p)
}

// script returns the parameters of sliding_window in decide.lua: limit,
// the window in µs, slots and cost. Slots of whole microseconds, and
// (limit+1)·window below 2^53.
func (w *slidingWindow) script() ([5]int64, error) {
	win, err := scriptMicros(SlidingWindow, w.Window, "window", "window")
	if err != nil {
		return [5]int64{}, err
	}
	if win%int64(w.Slots) != 0 {
		return [5]int64{}, paramErr(SlidingWindow, "slots", "window %v does not divide into %d slots of whole microseconds", w.Window, w.Slots)
	}
	if w.Limit+1 > scriptExact/win {
		return [5]int64{}, scriptTooBig(SlidingWindow, "limit")
	}
	return [5]int64{w.Limit, win, int64(w.Slots), w.Cost}, nil
}

// Sliding-window states with their counters inline, sized for the
// Slots+1 counters a limit needs (the current slot, Slots−1 whole ones
// and the oldest, partly covered one): 2 (Slots = 1), up to 8, up to 65.
type (
	swCounts2 struct {
		slot int64 // the newest slot written
		c    [2]uint32
	}
	swCounts8 struct {
		slot int64
		c    [8]uint32
	}
	swCounts65 struct {
		slot int64
		c    [MaxSlots + 1]uint32
	}
)

func (w *slidingWindow) newStates(n int) States {
	switch k := w.Slots + 1; {
	case k <= len(swCounts2{}.c):
		return make(array[swCounts2], n)
	case k <= len(swCounts8{}.c):
		return make(array[swCounts8], n)
	}
	return make(array[swCounts65], n)
}

// state returns the view of state i of st (st nil: of fresh, a fresh
// key's).
func (w *slidingWindow) state(st States, i int, fresh *swCounts65) slidingWindowState {
	k := w.Slots + 1
	switch a := st.(type) {
	case array[swCounts2]:
		return slidingWindowState{&a[i].slot, a[i].c[:k]}
	case array[swCounts8]:
		return slidingWindowState{&a[i].slot, a[i].c[:k]}
	case array[swCounts65]:
		return slidingWindowState{&a[i].slot, a[i].c[:k]}
	}
	return slidingWindowState{&fresh.slot, fresh.c[:k]}
}

// idleAt is when every unit of s has left the window.
func (w *slidingWindow) idleAt(st States, i int, _ *Queue) time.Time {
	var fresh swCounts65
	s := w.state(st, i, &fresh)
	z, ok := newestUsed(s, *s.Slot, *s.Slot, false)
	if !ok {
		return time.Time{}
	}
	_, end := w.slots.bounds(z)
	return instant(satAdd(end, int64(w.Window)))
}

// slidingWindowState is a view of a sliding window's state of one key:
// the index of the newest slot written, and Slots+1 counters used as a
// ring (counter j mod (Slots+1) belongs to slot j). The zero slot with
// all-zero counters is a fresh key.
type slidingWindowState struct {
	Slot   *int64   // index of the newest slot written
	Counts []uint32 // Slots+1 counters
}

// count returns the units of slot j, given newest slot cur.
func (s slidingWindowState) count(cur, j int64) int64 {
	k := int64(len(s.Counts))
	if j > cur || j <= cur-k {
		return 0
	}
	return int64(s.Counts[mod(j, k)])
}

func (s slidingWindowState) empty() bool {
	for _, c := range s.Counts {
		if c != 0 {
			return false
		}
	}
	return true
}

// step applies a request of weight n at now to state i of st (st nil: a
// fresh key's); with commit false it only reads. An instant in a slot earlier
// than the newest one written counts at the start of that newest slot, the
// most conservative reading.
//
// Memory: 8 + 4·(Slots+1) bytes per key (16 for Slots = 1). The caller must
// serialise calls on one state.
func (w *slidingWindow) step(st States, i int, _ *Queue, now time.Time, n int64, commit bool) (d Decision) {
	var fresh swCounts65
	s := w.state(st, i, &fresh)
	c, ok := weighted(n, w.Cost, w.Limit)
	if !ok {
		return never(w.Limit)
	}
	L, k := w.slot, int64(w.Slots)
	t := nanos(now)
	j := w.slots.index(t)
	cur := *s.Slot
	if s.empty() {
		cur = j
	}
	if j < cur {
		j = cur
		t, _ = w.slots.bounds(cur)
	}

	// Estimate·L = sum·L + oldest·((j+1)L − t), compared exactly in 128 bits.
	var sum int64
	for i := j - k + 1; i <= j; i++ {
		sum += s.count(cur, i)
	}
	oldest := s.count(cur, j-k)
	_, end := w.slots.bounds(j)
	weight := end - t // in (0, L]
	used := mul128(sum, L).add(mul128(oldest, weight))
	capacity := mul128(w.Limit, L)

	d = Decision{Limit: w.Limit}
	if used.add(mul128(c, L)).less(capacity.add(u128{0, 1})) {
		d.Allowed = true
		used = used.add(mul128(c, L))
		if commit {
			s.advance(cur, j)
			s.Counts[mod(j, k+1)] += uint32(c)
			*s.Slot = j
		}
	} else {
		d.RetryAfter = time.Duration(w.retry(s, cur, j, t, c) - nanos(now))
	}
	if used.less(capacity) {
		d.Remaining = capacity.sub(used).div(L)
	}
	if d.Remaining < w.Limit {
		// One more unit fits once the estimate has fallen by the fraction
		// Remaining leaves out: the retry instant of Remaining+1 units,
		// on the state as this request leaves it.
		after, acur := s, cur
		if d.Allowed {
			acur = j
			if !commit {
				var counts [MaxSlots + 1]uint32
				slot := cur
				after = slidingWindowState{Slot: &slot, Counts: counts[:len(s.Counts)]}
				copy(after.Counts, s.Counts)
				after.advance(cur, j)
				after.Counts[mod(j, k+1)] += uint32(c)
			}
		}
		d.Next = time.Duration(w.retry(after, acur, j, t, d.Remaining+1) - nanos(now))
	}
	d.ResetAt = now
	if z, ok := newestUsed(s, cur, j, d.Allowed && c > 0); ok {
		_, end := w.slots.bounds(z)
		if at := satAdd(end, int64(w.Window)); at > nanos(now) {
			d.ResetAt = instant(at)
		}
	}
	return d
}

// charge charges (n > 0) or refunds (n < 0) n units to state i of st at
// now, for a request reserved at reservedAt, unconditionally, and returns
// the state's decision after it (see Charger): never refused. The limit's
// Cost is not applied.
//
// A charge adds the units to the reservation's slot while the window at
// now still covers it (wholly or partly), which is exactly what charging
// them with the reservation would have done; once that slot has left the
// window, to the current slot, so that an answer longer than the window
// still pays. The slot may go past Limit: the estimate then rejects until
// enough of it has left the window. The counts of the slots the window
// holds (Slots whole ones and the oldest, partly covered one, counted in
// full) stay at most 2·Limit; the units beyond are reported as capped.
//
// A refund takes units back (down to zero) from the reservation's slot
// only, and only while the window at now still covers it: a slot that
// has left counts against nothing any more. An instant before the newest
// slot written (time going backwards) is read as that slot, as Decide
// reads it; a reservation made then may have been counted in a later slot
// than its instant's, and a refund then takes back units that leave the
// window sooner than the reservation's (it errs towards the limit).
func (w *slidingWindow) charge(st States, i int, now, reservedAt time.Time, n int64) Decision {
	var fresh swCounts65
	s := w.state(st, i, &fresh)
	u := chargeUnits(n, 2*w.Limit+1)
	k := int64(w.Slots)
	j := w.slots.index(nanos(now))
	cur := *s.Slot
	if s.empty() {
		cur = j
	}
	j = max(j, cur)
	r := w.slots.index(min(nanos(reservedAt), nanos(now))) // the reservation's slot
	capped := false
	switch {
	case n > 0:
		s.advance(cur, j)
		*s.Slot = j
		var held int64 // the counts of slots j−k … j
		for i := j - k; i <= j; i++ {
			held += s.count(j, i)
		}
		take := min(u, max(0, 2*w.Limit-held))
		at := j
		if r >= j-k {
			at = r
		}
		s.Counts[mod(at, k+1)] += uint32(take)
		capped = take < u
	case n < 0:
		if r >= j-k {
			if c := s.count(cur, r); c > 0 {
				s.Counts[mod(r, k+1)] = uint32(c - min(c, u))
			}
		}
	}
	return chargeReport(w.step(st, i, nil, now, 0, false), capped)
}

// advance zeroes the counters of the slots after cur up to j, which the
// ring reuses.
func (s slidingWindowState) advance(cur, j int64) {
	k := int64(len(s.Counts))
	if j-cur >= k {
		clear(s.Counts)
		return
	}
	for i := cur + 1; i <= j; i++ {
		s.Counts[mod(i, k)] = 0
	}
}

// retry returns the first instant t' ≥ t at which a request of c units
// would be admitted if nothing else were: the estimate falls linearly
// within a slot and steps down as slots leave the window.
func (w *slidingWindow) retry(s slidingWindowState, cur, j, t, c int64) int64 {
	L, k := w.slot, int64(w.Slots)
	var sum int64 // of the whole slots m−k+1..m, kept as m advances
	for i := j - k + 1; i <= j; i++ {
		sum += s.count(cur, i)
	}
	for m := j; m <= j+k+1; m++ {
		if m > j {
			sum += s.count(cur, m) - s.count(cur, m-k)
		}
		if sum+c > w.Limit {
			continue
		}
		start, end := w.slots.bounds(m)
		lo := max(t, start)
		oldest := s.count(cur, m-k)
		if oldest == 0 {
			return lo
		}
		// Need oldest·(end − t') ≤ (Limit − sum − c)·L.
		at := end - mulDiv(w.Limit-sum-c, L, oldest)
		if at = max(at, lo); at < end {
			return at
		}
	}
	return t // unreachable: after k+1 slots nothing is left in the window
}

// newestUsed returns the newest slot holding units after the step, if any.
func newestUsed(s slidingWindowState, cur, j int64, added bool) (int64, bool) {
	if added {
		return j, true
	}
	for i := cur; i > cur-int64(len(s.Counts)); i-- {
		if s.count(cur, i) > 0 {
			return i, true
		}
	}
	return 0, false
}
