package driver

import "time"

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
// use, admits about 3×Limit
// on steady traffic instead.
type SlidingWindowParams struct {
	Limit  int64         // units per window, 1..MaxCount
	Window time.Duration // must be positive and a whole multiple of Slots nanoseconds
	Slots  int           // 1..MaxSlots
	Cost   int64         // units per request; 0 means 1; at most Limit
}

type slidingWindow struct {
	SlidingWindowParams
	slot int64 // slot length L in ns
}

// NewSlidingWindow validates p and returns the limit.
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
	return Limit{alg: SlidingWindow, cost: cost, sw: slidingWindow{p, int64(p.Window) / int64(p.Slots)}}, nil
}

// SlidingWindowCounters returns how many counters a sliding window state
// needs: Slots+1 (the current slot, Slots−1 whole ones, and the oldest,
// partly covered one).
func (l *Limit) SlidingWindowCounters() int { return l.sw.Slots + 1 }

// SlidingWindowState is a view of the state a Store keeps per key for a
// sliding window: the index of the newest slot written, and Slots+1
// counters used as a ring (counter j mod (Slots+1) belongs to slot j). The
// Store owns the memory; the zero slot with all-zero counters is a fresh key.
type SlidingWindowState struct {
	Slot   *int64   // index of the newest slot written
	Counts []uint32 // len = SlidingWindowCounters()
}

// count returns the units of slot j, given newest slot cur.
func (s SlidingWindowState) count(cur, j int64) int64 {
	k := int64(len(s.Counts))
	if j > cur || j <= cur-k {
		return 0
	}
	return int64(s.Counts[mod(j, k)])
}

func (s SlidingWindowState) empty() bool {
	for _, c := range s.Counts {
		if c != 0 {
			return false
		}
	}
	return true
}

// StepSlidingWindow applies a request of weight n at now to s, the state of
// limit l, and returns the decision; an admitted request consumes from s.
// The caller must serialise calls on one state.
func (l *Limit) StepSlidingWindow(s SlidingWindowState, now time.Time, n int64) Decision {
	return l.stepSlidingWindow(s, now, n, true)
}

// PeekSlidingWindow returns the decision StepSlidingWindow would return, leaving s
// unchanged: a Store checks every limit of a policy this way before it
// consumes from any.
func (l *Limit) PeekSlidingWindow(s SlidingWindowState, now time.Time, n int64) Decision {
	return l.stepSlidingWindow(s, now, n, false)
}

// stepSlidingWindow applies a request of weight n at now to s (the state
// of limit l); with commit false it only reads. An instant in a slot earlier
// than the newest one written counts at the start of that newest slot, the
// most conservative reading.
//
// Memory: 8 + 4·(Slots+1) bytes per key (16 for Slots = 1). The caller must
// serialise calls on one state.
func (l *Limit) stepSlidingWindow(s SlidingWindowState, now time.Time, n int64, commit bool) Decision {
	p := &l.sw
	c, ok := weighted(n, l.cost, p.Limit)
	if !ok {
		return never(p.Limit)
	}
	L, k := p.slot, int64(p.Slots)
	t := nanos(now)
	j := floorDiv(t, L)
	cur := *s.Slot
	if s.empty() {
		cur = j
	}
	if j < cur {
		j, t = cur, cur*L
	}

	// Estimate·L = sum·L + oldest·((j+1)L − t), compared exactly in 128 bits.
	var sum int64
	for i := j - k + 1; i <= j; i++ {
		sum += s.count(cur, i)
	}
	oldest := s.count(cur, j-k)
	weight := (j+1)*L - t // in (0, L]
	used := mul128(sum, L).add(mul128(oldest, weight))
	capacity := mul128(p.Limit, L)

	d := Decision{Limit: p.Limit}
	if used.add(mul128(c, L)).less(capacity.add(u128{0, 1})) {
		d.Allowed = true
		used = used.add(mul128(c, L))
		if commit {
			s.advance(cur, j)
			s.Counts[mod(j, k+1)] += uint32(c)
			*s.Slot = j
		}
	} else {
		d.RetryAfter = time.Duration(l.slidingWindowRetry(s, cur, j, t, c) - nanos(now))
	}
	if used.less(capacity) {
		d.Remaining = capacity.sub(used).div(L)
	}
	if d.Remaining < p.Limit {
		// One more unit fits once the estimate has fallen by the fraction
		// Remaining leaves out: the retry instant of Remaining+1 units,
		// on the state as this request leaves it.
		after, acur := s, cur
		if d.Allowed {
			acur = j
			if !commit {
				var counts [MaxSlots + 1]uint32
				slot := cur
				after = SlidingWindowState{Slot: &slot, Counts: counts[:len(s.Counts)]}
				copy(after.Counts, s.Counts)
				after.advance(cur, j)
				after.Counts[mod(j, k+1)] += uint32(c)
			}
		}
		d.Next = time.Duration(l.slidingWindowRetry(after, acur, j, t, d.Remaining+1) - nanos(now))
	}
	d.ResetAt = now
	if z, ok := newestUsed(s, cur, j, d.Allowed && c > 0); ok {
		if at := satAdd((z+1)*L, int64(p.Window)); at > nanos(now) {
			d.ResetAt = instant(at)
		}
	}
	return d
}

// ChargeSlidingWindow charges (n > 0) or refunds (n < 0) n units to s,
// the state of limit l, at now, for a request reserved at reservedAt,
// unconditionally, and returns the state's decision after it (see
// Charger): never refused. The limit's Cost is not applied. The caller
// must serialise calls on one state.
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
func (l *Limit) ChargeSlidingWindow(s SlidingWindowState, now, reservedAt time.Time, n int64) Decision {
	p := &l.sw
	u := chargeUnits(n, 2*p.Limit+1)
	L, k := p.slot, int64(p.Slots)
	j := floorDiv(nanos(now), L)
	cur := *s.Slot
	if s.empty() {
		cur = j
	}
	j = max(j, cur)
	r := floorDiv(min(nanos(reservedAt), nanos(now)), L) // the reservation's slot
	capped := false
	switch {
	case n > 0:
		s.advance(cur, j)
		*s.Slot = j
		var held int64 // the counts of slots j−k … j
		for i := j - k; i <= j; i++ {
			held += s.count(j, i)
		}
		take := min(u, max(0, 2*p.Limit-held))
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
	return chargeReport(l.stepSlidingWindow(s, now, 0, false), capped)
}

// advance zeroes the counters of the slots after cur up to j, which the
// ring reuses.
func (s SlidingWindowState) advance(cur, j int64) {
	k := int64(len(s.Counts))
	if j-cur >= k {
		clear(s.Counts)
		return
	}
	for i := cur + 1; i <= j; i++ {
		s.Counts[mod(i, k)] = 0
	}
}

// slidingWindowRetry returns the first instant t' ≥ t at which a request of
// c units would be admitted if nothing else were: the estimate falls
// linearly within a slot and steps down as slots leave the window.
func (l *Limit) slidingWindowRetry(s SlidingWindowState, cur, j, t, c int64) int64 {
	p := &l.sw
	L, k := p.slot, int64(p.Slots)
	var sum int64 // of the whole slots m−k+1..m, kept as m advances
	for i := j - k + 1; i <= j; i++ {
		sum += s.count(cur, i)
	}
	for m := j; m <= j+k+1; m++ {
		if m > j {
			sum += s.count(cur, m) - s.count(cur, m-k)
		}
		if sum+c > p.Limit {
			continue
		}
		lo := max(t, m*L)
		oldest := s.count(cur, m-k)
		if oldest == 0 {
			return lo
		}
		// Need oldest·((m+1)L − t') ≤ (Limit − sum − c)·L.
		at := (m+1)*L - mulDiv(p.Limit-sum-c, L, oldest)
		if at = max(at, lo); at < (m+1)*L {
			return at
		}
	}
	return t // unreachable: after k+1 slots nothing is left in the window
}

// newestUsed returns the newest slot holding units after the step, if any.
func newestUsed(s SlidingWindowState, cur, j int64, added bool) (int64, bool) {
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

// SlidingWindowIdleAt returns when every unit of s has left the window.
func (l *Limit) SlidingWindowIdleAt(s SlidingWindowState) time.Time {
	z, ok := newestUsed(s, *s.Slot, *s.Slot, false)
	if !ok {
		return time.Time{}
	}
	return instant(satAdd((z+1)*l.sw.slot, int64(l.sw.Window)))
}
