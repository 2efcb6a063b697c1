package driver

import (
	"fmt"
	"time"
)

// SlidingLogParams configures a sliding log (docs/algorithms.md): a
// request of cost c is admitted at t iff the units admitted in
// (t−Window, t] plus c are at most Limit. It is exact, and costs 8 bytes
// per unit in the window per key, hence MaxSlidingLogLimit; a sliding
// window approximates it in constant memory. The zero value is not
// valid.
type SlidingLogParams struct {
	Limit  int64         // units per window, 1..MaxSlidingLogLimit
	Window time.Duration // must be positive
	Cost   int64         // units per request of weight 1; 0 means 1; at most Limit
}

// slidingLog is SlidingLogParams compiled (it needs nothing more).
type slidingLog struct{ SlidingLogParams }

// NewSlidingLog validates p and returns the limit, or a *ParamError.
func NewSlidingLog(p SlidingLogParams) (Limit, error) {
	if p.Limit > MaxSlidingLogLimit {
		return Limit{}, paramErr(SlidingLog, "limit", "%d is above the maximum of %d: a sliding log keeps one timestamp per admitted request; use sliding_window for large limits", p.Limit, MaxSlidingLogLimit)
	}
	if err := checkCount(SlidingLog, "limit", p.Limit, MaxSlidingLogLimit); err != nil {
		return Limit{}, err
	}
	if err := checkWindow(SlidingLog, p.Window); err != nil {
		return Limit{}, err
	}
	cost, err := checkCost(SlidingLog, p.Cost, p.Limit, "limit")
	if err != nil {
		return Limit{}, err
	}
	p.Cost = cost
	return Limit{alg: SlidingLog, cost: cost, a: &slidingLog{p}}, nil
}

func (*slidingLog) name() string { return "sliding_log" }

func (*slidingLog) keys() (takes, requires []string) {
	return []string{"limit", "window", "cost"}, []string{"limit", "window"}
}

func (*slidingLog) build(s Spec) (Limit, error) {
	return NewSlidingLog(SlidingLogParams{Limit: s.Limit, Window: s.Window, Cost: s.Cost})
}

func (g *slidingLog) params() any { return g.SlidingLogParams }

func (g *slidingLog) quota() (int64, time.Duration) { return g.Limit, g.Window }

func (g *slidingLog) describe() string { return fmt.Sprintf("limit=%d window=%v", g.Limit, g.Window) }

// stateName: entries are instants, which mean the same under any window
// and limit: a changed window keeps them.
func (g *slidingLog) stateName() string { return "" }

// scaled scales the limit, at most MaxSlidingLogLimit.
func (g *slidingLog) scaled(s float64) (Limit, error) {
	p := g.SlidingLogParams
	p.Limit = scaleCount(p.Limit, s, MaxSlidingLogLimit)
	return NewSlidingLog(p)
}

// script returns the parameters of sliding_log in decide.lua: limit, the
// window in µs, and cost.
func (g *slidingLog) script() ([5]int64, error) {
	w, err := scriptMicros(SlidingLog, g.Window, "window", "window")
	if err != nil {
		return [5]int64{}, err
	}
	return [5]int64{g.Limit, w, g.Cost}, nil
}

func (g *slidingLog) newStates(n int) States { return make(array[slidingLogState], n) }

// idleAt is when every entry of s has left the window.
func (g *slidingLog) idleAt(st States, i int, _ *Queue) time.Time {
	var fresh slidingLogState
	s := stateAt(st, i, &fresh)
	if s.count == 0 {
		return time.Time{}
	}
	return instant(satAdd(s.at(s.count-1), int64(g.Window)))
}

// slidingLogState is a sliding log's state of one key: the instants of
// the admitted units still inside the window, oldest first, in a ring
// that grows on demand up to Limit entries (2·Limit in debt after a
// Charge) and shrinks as they expire. Its zero value is a fresh key.
type slidingLogState struct {
	ring  []int64 // Unix ns; len is the capacity
	head  int     // index of the oldest entry
	count int     // entries in use
}

func (s *slidingLogState) at(i int) int64 { return s.ring[(s.head+i)%len(s.ring)] }

// step applies a request of weight n at now to state i of st (st nil: a
// fresh key's); with commit false it only reads. An instant earlier than the
// newest entry is treated as that entry's instant.
//
// Memory: 8 bytes per admitted unit still in the window, at most
// 8·Limit bytes per key (16·Limit in debt after a Charge), plus a 40-byte
// header. The caller must serialise calls on one state.
func (g *slidingLog) step(st States, i int, _ *Queue, now time.Time, n int64, commit bool) (d Decision) {
	var fresh slidingLogState
	s := stateAt(st, i, &fresh)
	p := &g.SlidingLogParams
	c, ok := weighted(n, p.Cost, p.Limit)
	if !ok {
		return never(p.Limit)
	}
	t := nanos(now)
	if s.count > 0 {
		// Entries stay in time order: an earlier instant is read as the
		// newest entry's, which keeps the ring sorted and never frees a
		// place early.
		t = max(t, s.at(s.count-1))
	}
	// Entries at or before t−Window have left (t−Window, t]. They are only
	// counted here; the ring is trimmed when committing, so that a
	// read-only step (commit false) changes nothing.
	first := 0
	for first < s.count && s.at(first) <= t-int64(p.Window) {
		first++
	}
	inWindow := int64(s.count - first)

	d = Decision{Limit: p.Limit}
	newest, oldest := int64(0), t // oldest unit in the window after the step
	if inWindow > 0 {
		newest, oldest = s.at(s.count-1), s.at(first)
	}
	if inWindow+c <= p.Limit {
		d.Allowed = true
		inWindow += c
		if c > 0 {
			newest = t
		}
		if commit {
			s.drop(first)
			s.push(t, int(c), int(p.Limit))
		}
	} else {
		// The request fits once the oldest inWindow+c−Limit entries expire.
		leaves := s.at(first + int(inWindow+c-p.Limit) - 1)
		d.RetryAfter = time.Duration(satAdd(leaves, int64(p.Window)) - nanos(now))
		if inWindow >= p.Limit {
			// In debt (a Charge) or full: Remaining grows once
			// inWindow−Limit+1 entries have left, not just the oldest.
			oldest = s.at(first + int(inWindow-p.Limit))
		}
		if commit {
			s.drop(first)
		}
	}
	d.Remaining = max(0, p.Limit-inWindow) // entries in debt (Charge) leave none
	d.ResetAt = now
	if inWindow > 0 {
		d.ResetAt = instant(satAdd(newest, int64(p.Window)))
		d.Next = time.Duration(satAdd(oldest, int64(p.Window)) - nanos(now))
	}
	return d
}

// charge charges (n > 0) or refunds (n < 0) n units to state i of st at
// now, for a request reserved at reservedAt, unconditionally, and returns
// the state's decision after it (see Charger): never refused. The limit's
// Cost is not applied.
//
// A charge adds n entries at the reservation instant while it is still in
// the window (t − Window, t], exactly as charging them with the
// reservation would have (the log stays in time order: they go after the
// entries at or before that instant); once it has left, at now, so that
// an answer longer than the window still pays. The entries may pass
// Limit: requests are then rejected until enough have left. The entries
// in the window stay at most 2·Limit (so a key holds at most
// 2·MaxSlidingLogLimit timestamps, 1.6 MB); the units beyond are reported
// as capped.
//
// A refund removes up to |n| entries, the oldest at or after the
// reservation instant, and only while that instant is still in the
// window. Those are the reservation's own (entries at one instant are
// alike): removing the newest instead would drop later requests' entries,
// which leave later, and admit sooner than the reservation's true cost
// allows. A reservation recorded later than its instant (time going
// backwards, which Decide reads as the newest entry's instant) then loses
// older entries than its own: it errs towards the limit.
//
// It allocates only when the log grows past its ring (as Decide does).
func (g *slidingLog) charge(st States, i int, now, reservedAt time.Time, n int64) Decision {
	var fresh slidingLogState
	s := stateAt(st, i, &fresh)
	p := &g.SlidingLogParams
	u := chargeUnits(n, 2*p.Limit+1)
	w := int64(p.Window)
	t := nanos(now)
	if s.count > 0 {
		t = max(t, s.at(s.count-1))
	}
	r := min(nanos(reservedAt), nanos(now))
	capped := false
	if n != 0 {
		first := 0
		for first < s.count && s.at(first) <= t-w {
			first++
		}
		s.drop(first)
		switch {
		case n > 0:
			take := min(u, max(0, 2*p.Limit-int64(s.count)))
			at := t
			if r > t-w {
				at = r
			}
			s.insert(at, int(take), int(2*p.Limit))
			capped = take < u
		case r > t-w:
			s.remove(r, int(u))
		}
	}
	return chargeReport(g.step(st, i, nil, now, 0, false), capped)
}

// search returns the position of the first entry after t (after is
// false: at or after t).
func (s *slidingLogState) search(t int64, after bool) int {
	lo, hi := 0, s.count
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if v := s.at(m); v < t || after && v == t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// insert adds c entries at t after every entry at or before t, keeping the
// ring in time order, and grows it up to capacity entries (count + c must
// fit).
func (s *slidingLogState) insert(t int64, c, capacity int) {
	if c <= 0 {
		return
	}
	if need := s.count + c; need > len(s.ring) {
		s.resize(min(capacity, max(need, 2*len(s.ring), 4)))
	}
	at, size := s.search(t, true), len(s.ring)
	for i := s.count - 1; i >= at; i-- {
		s.ring[(s.head+i+c)%size] = s.ring[(s.head+i)%size]
	}
	for i := range c {
		s.ring[(s.head+at+i)%size] = t
	}
	s.count += c
}

// remove deletes up to c entries, the oldest at or after t.
func (s *slidingLogState) remove(t int64, c int) {
	at := s.search(t, false)
	c = min(c, s.count-at)
	if c <= 0 {
		return
	}
	size := len(s.ring)
	for i := at; i+c < s.count; i++ {
		s.ring[(s.head+i)%size] = s.ring[(s.head+i+c)%size]
	}
	s.count -= c
	if s.count == 0 {
		*s = slidingLogState{}
	}
}

// drop forgets the k oldest entries, and the ring when it is mostly empty:
// a key that was busy once must not keep Limit×8 bytes for ever.
func (s *slidingLogState) drop(k int) {
	if k == 0 {
		return
	}
	s.head = (s.head + k) % len(s.ring)
	s.count -= k
	switch {
	case s.count == 0:
		*s = slidingLogState{}
	case len(s.ring) > 16 && s.count < len(s.ring)/4:
		s.resize(len(s.ring) / 2)
	}
}

// push appends c entries at t, growing the ring by doubling (up to limit
// entries), so that a key that never gets busy never pays for its limit.
func (s *slidingLogState) push(t int64, c, limit int) {
	if need := s.count + c; need > len(s.ring) {
		s.resize(min(limit, max(need, 2*len(s.ring), 4)))
	}
	for range c {
		s.ring[(s.head+s.count)%len(s.ring)] = t
		s.count++
	}
}

func (s *slidingLogState) resize(size int) {
	r := make([]int64, size)
	for i := range s.count {
		r[i] = s.at(i)
	}
	s.ring, s.head = r, 0
}
