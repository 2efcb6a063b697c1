package concurrency

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// The adaptive limit (docs/concurrency.md says why each rule is there).
//
// It learns L, the requests in flight the upstream serves without a
// queue of its own, from R, the median time to response headers of the
// requests that were answered well (status below 500 but 429) in a
// window, against B, the baseline: that median when the upstream is not
// loaded. Overloaded answers (429, 503, 504, timeouts, refused or reset
// connections) are signals, never latency samples, so a backend that
// fails in a millisecond does not look fast.
//
// Each window (at least max(200 ms, 4R) and enough samples: 2L, between
// 5 and 20) ends with one decision, the first that applies:
//
//  1. overload signals in the window (2 or more, 5% of the answers or
//     more): L × 0.9, once per window, never per answer;
//  2. R over 1.3 B in two windows in a row: L cut towards 1.15 B, by at
//     most half; a cut of 15% or more is checked in the next window: if R
//     did not fall with L, the latency was not queueing — the upstream got
//     slower — and B moves up to R while L is restored;
//  3. the requests sent at the limit answered within 1.05 B, and their
//     mean within 1.05 times the mean of B's measurements: L grows, ×1.5
//     until the first sign of queueing (slow start), then by max(1, L/16).
//     The mean is there for the knee: past it, a few requests at the limit
//     wait for a worker, which moves the mean (Little's law: the mean is
//     the limit over the throughput once that is saturated) while the
//     median stays put, and a limit growing on the median alone settles
//     a few slots above the knee, each a queue inside the upstream;
//  4. otherwise L holds.
//
// B is the median of the last three clean measurements: windows in which
// no more than half the limit was in flight, and probes. It comes down at
// once when three windows in a row are faster than 0.85 B, and goes up
// by the check in rule 2. A probe, every 8 to 12 s while the limit binds,
// halves the limit for at most max(200 ms, 4R) and measures the requests
// sent once those before it have ended: requests wait in the queue
// meanwhile, none is shed for it (Envoy's probe, which pins the limit to
// a small number and rejects the rest, is what caused its 503 storms).
// After five windows at MinLimit, B is the R found there.
//
// The queue in front of the limit admits a request only if its foreseen
// wait, (queued+1) R / L, is within bounds scaled to B (CoDel's idea with
// its target and interval as fractions of the upstream's own latency):
// 0.4 B, or 0.2 B (at least 5 ms) once a queue has stood for an interval
// (2 B, at least 100 ms); everything else is shed at once, so a shed is
// answered in the handler's own time. A request still waiting at twice its
// bound, or B if longer, is shed then.
type controller struct {
	p     Params
	l     float64       // the limit learned
	base  time.Duration // B; 0 until the first window
	rLast time.Duration // R of the last window with samples
	rPrev float64       // R/B of the window before; 0: none
	epoch uint64        // bumped at every change of l: older samples are not its
	slow  bool          // slow start
	lRef  float64       // l before overload backoffs, to return to
	refAt time.Time     // when lRef was set
	clean []measure
	// baseMean is the mean latency of B's measurements (the median of
	// their means): beside B, a median, it shows a queue forming at the
	// limit, which moves the mean long before the median.
	baseMean time.Duration
	fast     int     // windows in a row under 0.85 B
	fastM    measure // the slowest of those
	atMin    int     // windows in a row at MinLimit
	verify   *verify // a cut to check

	// The window.
	start     time.Time
	good      []time.Duration // latencies of this epoch's good answers
	atLimit   []time.Duration // ...of those sent at the limit
	overload  int
	answers   int
	maxFlight int // most in flight at a dispatch
	binding   bool

	// The probe.
	probing    bool
	probeUntil time.Time
	probeL     int
	preProbe   uint64 // epoch at the probe's start: samples before it are not clean
	probeLeft  int    // requests sent before the probe still in flight
	nextProbe  time.Time
	probed     []time.Duration

	// The queue's state.
	queueSince time.Time // when the queue last became non-empty; zero: empty
	standing   bool
	lastShed   time.Time

	rand *rand.Rand
}

type verify struct {
	hi, lo float64
	rHi    time.Duration
}

// sample is one answer, with what held when its request was let through.
type sample struct {
	sent            time.Time
	latency         time.Duration
	outcome         Outcome
	limit, inFlight int
	epoch           uint64
}

func newController(p Params, now time.Time) *controller {
	c := &controller{p: p, l: float64(p.Limit), slow: true, start: now,
		rand: rand.New(rand.NewPCG(uint64(now.UnixNano()), 0x6c70))}
	c.l = max(float64(p.MinLimit), min(float64(p.MaxLimit), c.l))
	c.nextProbe = now.Add(c.probeGap())
	return c
}

func (c *controller) probeGap() time.Duration {
	return 8*time.Second + time.Duration(c.rand.Int64N(int64(4*time.Second)))
}

// limit is the limit in force: the probe's while one runs.
func (c *controller) limit(now time.Time, inFlight int) int {
	if c.probing {
		if now.Before(c.probeUntil) {
			return c.probeL
		}
		c.endProbe(now)
	}
	return c.clamp(c.l)
}

func (c *controller) clamp(l float64) int {
	return max(c.p.MinLimit, min(c.p.MaxLimit, int(l)))
}

// dispatched notes a request let through, with inFlight now in flight.
func (c *controller) dispatched(inFlight, limit int) {
	c.maxFlight = max(c.maxFlight, inFlight)
	if inFlight >= limit {
		c.binding = true
	}
}

// queueGrew notes a request queued.
func (c *controller) queueGrew(now time.Time) {
	if c.queueSince.IsZero() {
		c.queueSince = now
	}
	c.binding = true
}

// shedLate notes a request shed after waiting.
func (c *controller) shedLate(now time.Time) { c.lastShed = now }

// interval is the queue's CoDel interval: 2 B, within [100 ms, 1 s].
func (c *controller) interval() time.Duration {
	return min(time.Second, max(100*time.Millisecond, 2*c.base))
}

// admit decides whether a request may wait, with queued waiting before
// it: "" and how long at most, or why not.
func (c *controller) admit(queued, limit int, maxWait time.Duration, now time.Time) (Reason, time.Duration) {
	if queued >= max(8, 2*limit) {
		return ReasonQueueFull, 0
	}
	if c.base == 0 {
		// Nothing learned yet: the configured bounds alone.
		return "", maxWait
	}
	iv := c.interval()
	if !c.queueSince.IsZero() && now.Sub(c.queueSince) >= iv {
		c.standing = true
	}
	bound := min(maxWait, max(time.Millisecond, c.base*4/10))
	if c.standing {
		bound = min(maxWait, max(5*time.Millisecond, c.base*2/10))
	}
	if c.probing {
		// The probe's lower limit lasts a moment: the wait is foreseen at
		// the limit learned, so that the probe itself sheds nobody.
		limit = c.clamp(c.l)
	}
	r := max(c.rLast, c.base)
	wait := time.Duration(float64(queued+1) * float64(r) / float64(max(1, limit)))
	if wait > bound {
		c.lastShed = now
		return ReasonWait, 0
	}
	return "", min(maxWait, max(2*bound, c.base))
}

// observe takes an answer; inFlight and queued are the figures after it.
func (c *controller) observe(s sample, inFlight, queued int, now time.Time) {
	if queued == 0 {
		c.queueSince = time.Time{}
		if c.standing && now.Sub(c.lastShed) >= c.interval() {
			c.standing = false
		}
	}
	if c.probing {
		if s.epoch < c.preProbe && c.probeLeft > 0 {
			c.probeLeft--
		} else if s.epoch >= c.preProbe && c.probeLeft == 0 && s.outcome == Good {
			// Sent once the requests from before the probe had ended.
			c.probed = append(c.probed, s.latency)
		}
		if len(c.probed) >= max(8, c.probeL) || !now.Before(c.probeUntil) {
			c.endProbe(now)
		}
	}
	c.answers++
	switch s.outcome {
	case Overload:
		c.overload++
	case Good:
		if s.epoch == c.epoch && len(c.good) < 64 {
			c.good = append(c.good, s.latency)
			if s.inFlight >= s.limit-1 && len(c.atLimit) < 64 {
				c.atLimit = append(c.atLimit, s.latency)
			}
		}
	}
	if !c.probing && !now.Before(c.nextProbe) && c.binding && c.verify == nil && c.base > 0 {
		c.startProbe(inFlight, now)
		return
	}
	elapsed := now.Sub(c.start)
	need := min(20, max(5, int(2*c.l)))
	if (elapsed >= min(time.Second, max(200*time.Millisecond, 4*c.rLast)) && len(c.good) >= need) ||
		(c.overload >= 5 && elapsed >= 100*time.Millisecond) || elapsed >= 2*time.Second {
		c.decide(now)
	}
}

// decide ends a window.
func (c *controller) decide(now time.Time) {
	defer c.newWindow(now)
	if c.probing {
		return // the probe's own measurement decides
	}
	if c.overload >= 2 && float64(c.overload) >= 0.05*float64(c.answers) {
		if c.lRef == 0 || now.Sub(c.refAt) > time.Minute {
			c.lRef, c.refAt = c.l, now
		}
		c.set(max(float64(c.p.MinLimit), 0.9*c.l))
		c.slow, c.rPrev, c.verify = false, 0, nil
		return
	}
	if len(c.good) < 5 {
		return
	}
	r := median(c.good)
	c.rLast = r
	m := measure{r, mean(c.good)}
	if c.base == 0 {
		c.setBase(m)
	}
	if v := c.verify; v != nil {
		c.verify = nil
		if float64(r)/float64(v.rHi) >= (1+v.lo/v.hi)/2 {
			// The latency did not follow the limit down: not a queue, a
			// slower upstream. Its new baseline, and the limit back.
			c.setBase(m)
			c.set(v.hi)
			c.rPrev = 0
			return
		}
	}
	if c.maxFlight*2 <= int(c.l) && len(c.good) >= 10 {
		c.addClean(m)
	}
	if float64(r) < 0.85*float64(c.base) {
		c.fast++
		if m.med > c.fastM.med {
			c.fastM = m
		}
		if c.fast >= 3 {
			c.setBase(c.fastM)
			c.fast, c.fastM = 0, measure{}
		}
	} else {
		c.fast, c.fastM = 0, measure{}
	}
	ratio := float64(r) / float64(c.base)
	prev := c.rPrev
	c.rPrev = ratio
	switch {
	case ratio > 1.3 && prev > 1.3:
		m := min(ratio, prev)
		l := max(0.5*c.l, c.l*1.15/m)
		if l <= 0.85*c.l {
			c.verify = &verify{hi: c.l, lo: l, rHi: r}
		}
		c.set(max(float64(c.p.MinLimit), l))
		c.slow, c.rPrev = false, 0
	case len(c.atLimit) >= 5 && float64(median(c.atLimit)) < 1.05*float64(c.base) && float64(mean(c.atLimit)) < 1.05*float64(c.baseMean):
		switch {
		case c.slow:
			c.set(c.l * 1.5)
		case c.lRef > c.l && now.Sub(c.refAt) <= time.Minute:
			c.set(min(2*c.l, c.lRef))
		default:
			c.set(c.l + max(1, c.l/16))
		}
	}
	if ratio >= 1.05 {
		c.slow = false
	}
	if c.clamp(c.l) <= c.p.MinLimit {
		if c.atMin++; c.atMin >= 5 {
			c.setBase(m)
			c.atMin = 0
		}
	} else {
		c.atMin = 0
	}
}

// set changes the limit, starting a new epoch.
func (c *controller) set(l float64) {
	l = max(float64(c.p.MinLimit), min(float64(c.p.MaxLimit), l))
	if l != c.l {
		c.l = l
		c.epoch++
	}
}

func (c *controller) newWindow(now time.Time) {
	c.start = now
	c.good, c.atLimit = c.good[:0], c.atLimit[:0]
	c.overload, c.answers, c.maxFlight, c.binding = 0, 0, 0, false
}

// measure is a window's latencies summed up: their median and mean.
type measure struct{ med, mean time.Duration }

// setBase makes m the baseline and its only measurement.
func (c *controller) setBase(m measure) {
	c.base, c.baseMean = m.med, m.mean
	c.clean = append(c.clean[:0], m)
}

// addClean adds a clean measurement: B is the median of the last three
// medians, baseMean the median of their means.
func (c *controller) addClean(m measure) {
	c.clean = append(c.clean, m)
	if len(c.clean) > 3 {
		c.clean = c.clean[len(c.clean)-3:]
	}
	meds := make([]time.Duration, 0, 3)
	means := make([]time.Duration, 0, 3)
	for _, x := range c.clean {
		meds, means = append(meds, x.med), append(means, x.mean)
	}
	c.base, c.baseMean = median(meds), median(means)
}

func (c *controller) startProbe(inFlight int, now time.Time) {
	c.probing = true
	c.probeL = max(c.p.MinLimit, int(math.Ceil(c.l/2)))
	c.probeUntil = now.Add(max(200*time.Millisecond, 4*c.rLast))
	c.epoch++
	c.preProbe = c.epoch
	c.probeLeft = inFlight
	c.probed = c.probed[:0]
	c.newWindow(now)
}

func (c *controller) endProbe(now time.Time) {
	c.probing = false
	gap := c.probeGap()
	if len(c.probed) >= 5 {
		rp := measure{median(c.probed), mean(c.probed)}
		// Measurements well above the probe's were taken under load.
		c.clean = slices.DeleteFunc(c.clean, func(m measure) bool { return float64(m.med) > 1.15*float64(rp.med) })
		old := c.base
		c.addClean(rp)
		if float64(c.base) < 0.9*float64(old) {
			gap = time.Second // converging: look again soon
		}
	}
	c.nextProbe = now.Add(gap)
	c.epoch++ // the limit returns to l
	c.rPrev = 0
	c.newWindow(now)
}

// mean returns the mean of d, which is not empty.
func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// median returns the middle of d (reordered), the lower middle for an
// even count.
func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[(len(d)-1)/2]
}
