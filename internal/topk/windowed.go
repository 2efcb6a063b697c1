package topk

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// WindowedParams configures a Windowed.
type WindowedParams struct {
	K      int           // counters per epoch, 1..MaxK
	Period time.Duration // length of an epoch; must be positive
}

// Windowed reports the heaviest keys of recent traffic rather than of all
// time: Space-Saving over epochs of length Period, keeping two summaries,
// the current epoch's and the previous one's, each of K counters. Epochs
// are aligned to the Unix epoch: epoch e covers the instants whose Unix
// time falls in [e·Period, (e+1)·Period). So Top at an instant in epoch e
// describes epochs e−1 and e, the last Period to 2·Period of traffic.
//
// Time is an argument: every method takes now and rotates the summaries
// when now has reached a new epoch (dropping the older one, or both if a
// whole epoch passed in silence). An instant earlier than the newest seen
// is treated as in the newest epoch seen: its weight counts in the current
// epoch and a read sees the current pair, so goroutines whose clock
// readings reach the lock slightly out of order are harmless. A rotation
// clears a summary in O(K) under the lock, once per epoch at most.
//
// Create a Windowed with NewWindowed; the zero Windowed is not usable. It
// is safe for concurrent use.
type Windowed struct {
	seed   maphash.Seed
	period int64 // nanoseconds, > 0
	mu     sync.Mutex
	// Guarded by mu:
	epoch     int64 // the newest epoch seen; math.MinInt64 before any
	cur, prev summary
}

// NewWindowed validates p and returns an empty Windowed. Its memory, all
// allocated here, is twice a Sketch's of p.K counters.
func NewWindowed(p WindowedParams) (*Windowed, error) {
	if err := checkK(p.K); err != nil {
		return nil, err
	}
	if p.Period <= 0 {
		return nil, fmt.Errorf("topk: period must be positive, got %v", p.Period)
	}
	return &Windowed{
		seed:   maphash.MakeSeed(),
		period: int64(p.Period),
		epoch:  math.MinInt64,
		cur:    newSummary(p.K),
		prev:   newSummary(p.K),
	}, nil
}

// Add adds weight to key's count in the epoch of now, as Sketch.Add does
// (the same rules for a zero weight, saturation, and the key string that
// is kept).
func (w *Windowed) Add(key string, weight uint64, now time.Time) {
	if weight == 0 {
		return
	}
	t := tag(w.seed, key)
	w.mu.Lock()
	w.advance(now)
	w.cur.add(key, t, weight)
	w.mu.Unlock()
}

// Top returns the n keys with the largest counts over the epoch of now and
// the one before (all of them if fewer, none if n ≤ 0), by Count
// descending and then by Key ascending; the result is a new slice. It
// merges the two summaries, which may hold up to 2K keys between them: a
// key's Count is the sum of its two counts, where a summary that does not
// track the key contributes the most the key can have had there (its
// smallest count if full, else 0), and likewise its Err is the sum of the
// two errors, that contribution counting as error. Thus each true count
// over the two epochs lies in [Count−Err, Count], Err is at most
// N_prev/K + N_cur/K = Total(now)/K (the sum of the two summaries'
// bounds), and every key whose true count over the two epochs exceeds
// Total(now)/K is in Top(2K).
func (w *Windowed) Top(n int, now time.Time) []Entry {
	if n <= 0 {
		return nil
	}
	w.mu.Lock()
	w.advance(now)
	es := make([]Entry, 0, len(w.cur.heap.nodes)+len(w.prev.heap.nodes))
	fc, fp := w.cur.floor(), w.prev.floor()
	for _, nd := range w.cur.heap.nodes {
		e := w.cur.entry(nd)
		if j := w.prev.keys.find(e.Key, w.cur.keys.tags[nd.slot]); j >= 0 {
			e = plus(e, w.prev.heap.value(j), w.prev.err[j])
		} else {
			e = plus(e, fp, fp)
		}
		es = append(es, e)
	}
	for _, nd := range w.prev.heap.nodes {
		if e := w.prev.entry(nd); w.cur.keys.find(e.Key, w.prev.keys.tags[nd.slot]) < 0 {
			es = append(es, plus(e, fc, fc)) // keys in both are done
		}
	}
	w.mu.Unlock()
	return sortTop(es, n)
}

// Total returns the sum of the weights added in the epoch of now and the
// one before (saturating at math.MaxUint64).
func (w *Windowed) Total(now time.Time) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.advance(now)
	return satAdd(w.cur.total, w.prev.total)
}

// advance rotates the summaries to now's epoch. It requires w.mu held.
func (w *Windowed) advance(now time.Time) {
	e := epochOf(now, w.period)
	switch {
	case e <= w.epoch:
		return // the same epoch, or time went backwards: stay
	case e == w.epoch+1:
		w.cur, w.prev = w.prev, w.cur
		w.cur.reset()
	default:
		w.cur.reset()
		w.prev.reset()
	}
	w.epoch = e
}

// plus returns e with count and err added to its own.
func plus(e Entry, count, err uint64) Entry {
	e.Count, e.Err = satAdd(e.Count, count), satAdd(e.Err, err)
	return e
}

// epochOf returns the number of the epoch of length period (nanoseconds)
// that holds now: ⌊UnixNano/period⌋, rounded down for instants before
// 1970 too.
func epochOf(now time.Time, period int64) int64 {
	ns := now.UnixNano()
	e := ns / period
	if ns%period < 0 {
		e--
	}
	return e
}
