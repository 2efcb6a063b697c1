package driver

import "time"

// FixedWindowParams configures a fixed window (docs/algorithms.md): time is cut into
// windows of length Window aligned to the Unix epoch (window k is
// [k·Window, (k+1)·Window)), and at most Limit units are admitted per window.
type FixedWindowParams struct {
	Limit  int64         // units per window, 1..MaxCount
	Window time.Duration // must be positive
	Cost   int64         // units per request; 0 means 1; at most Limit
}

// NewFixedWindow validates p and returns the limit.
func NewFixedWindow(p FixedWindowParams) (Limit, error) {
	if err := checkCount(FixedWindow, "limit", p.Limit, MaxCount); err != nil {
		return Limit{}, err
	}
	if err := checkWindow(FixedWindow, p.Window); err != nil {
		return Limit{}, err
	}
	cost, err := checkCost(FixedWindow, p.Cost, p.Limit, "limit")
	if err != nil {
		return Limit{}, err
	}
	p.Cost = cost
	return Limit{alg: FixedWindow, cost: cost, fw: p}, nil
}

// FixedWindowState is the state a Store keeps per key for a fixed window:
// 16 bytes. Its zero value is a fresh key.
type FixedWindowState struct {
	window int64 // index of the window count belongs to
	count  int64 // units admitted in that window; 0 means fresh
}

// StepFixedWindow applies a request of weight n at now to s, the state of
// limit l, and returns the decision; an admitted request consumes from s.
// The caller must serialise calls on one state.
func (l *Limit) StepFixedWindow(s *FixedWindowState, now time.Time, n int64) Decision {
	return l.stepFixedWindow(s, now, n, true)
}

// PeekFixedWindow returns the decision StepFixedWindow would return, leaving s
// unchanged: a Store checks every limit of a policy this way before it
// consumes from any.
func (l *Limit) PeekFixedWindow(s *FixedWindowState, now time.Time, n int64) Decision {
	return l.stepFixedWindow(s, now, n, false)
}

// stepFixedWindow applies a request of weight n at now to s (the state of
// limit l); with commit false it only reads. An instant in a window earlier
// than the one s has seen counts in that later window, so going back in
// time never reopens a window. Retry-After is the time to the next window.
//
// Memory: 16 bytes per key. The caller must serialise calls on one state.
func (l *Limit) stepFixedWindow(s *FixedWindowState, now time.Time, n int64, commit bool) Decision {
	p := &l.fw
	c, ok := weighted(n, l.cost, p.Limit)
	if !ok {
		return never(p.Limit)
	}
	t := nanos(now)
	w := int64(p.Window)
	// floorDiv, not /, so that instants before the epoch fall in the right
	// window too. A count of zero is a fresh key whatever its window says.
	idx, count := floorDiv(t, w), int64(0)
	if s.count > 0 && s.window >= idx {
		// The same window, or an earlier instant than the key has seen:
		// count it in the newest window, so a window never reopens.
		idx, count = s.window, s.count
	}
	end := satAdd(idx*w, w) // idx·w ≤ an instant seen, so it cannot overflow

	d := Decision{Limit: p.Limit}
	if count+c <= p.Limit {
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
	d.Remaining = max(0, p.Limit-count) // a count in debt (Charge) leaves none
	d.ResetAt = now
	if count > 0 {
		d.ResetAt = instant(end)
		d.Next = time.Duration(end - t)
	}
	return d
}

// ChargeFixedWindow charges (n > 0) or refunds (n < 0) n units to s, the
// state of limit l, at now, for a request reserved at reservedAt,
// unconditionally, and returns the state's decision after it (see
// Charger): never refused. The limit's Cost is not applied. The caller
// must serialise calls on one state.
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
func (l *Limit) ChargeFixedWindow(s *FixedWindowState, now, reservedAt time.Time, n int64) Decision {
	p := &l.fw
	u := chargeUnits(n, 2*p.Limit+1)
	t := nanos(now)
	w := int64(p.Window)
	idx, count := floorDiv(t, w), int64(0)
	if s.count > 0 && s.window >= idx {
		idx, count = s.window, s.count
	}
	capped := false
	switch {
	case n > 0:
		take := min(u, max(0, 2*p.Limit-count))
		s.window, s.count = idx, count+take
		capped = take < u
	case n < 0:
		if count > 0 && floorDiv(min(nanos(reservedAt), t), w) == idx {
			s.count = count - min(count, u)
		}
	}
	return chargeReport(l.stepFixedWindow(s, now, 0, false), capped)
}

// FixedWindowIdleAt returns when s stops counting: the end of its window.
func (l *Limit) FixedWindowIdleAt(s *FixedWindowState) time.Time {
	if s.count == 0 {
		return time.Time{}
	}
	w := int64(l.fw.Window)
	return instant(satAdd(s.window*w, w))
}
