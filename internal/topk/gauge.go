package topk

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// GaugeParams configures a Gauge.
type GaugeParams struct {
	K      int           // keys kept, 1..MaxK
	MaxAge time.Duration // how long a reading stays reported; must be positive
}

// Reading is a key's latest value in a Gauge and when it was observed.
type Reading struct {
	Key   string
	Value float64   // as observed, never NaN
	At    time.Time // the observation's instant, after clamping (see Gauge)
}

// Gauge keeps the K keys with the highest latest value, for a value each
// key reports again and again, such as the fraction of its limit a client
// has used at each decision (the keys closest to their limits).
// It ranks by each key's latest value, not its largest: a key whose value
// falls moves down.
//
// Observe(key, v, now) replaces the reading of a tracked key. An untracked
// key takes a free slot if there is one; else the slot of the oldest
// reading if that one has expired; else the slot of the lowest value if v
// is higher (ties stay out); else it is not kept. A reading observed at t
// expires when now − t ≥ MaxAge, and Top drops (and forgets) expired
// readings before it reports.
//
// So it is not exact, but it is bounded: each reading Top reports is its
// key's latest observation, and if Top(K, now) leaves out a key whose
// latest observation (v at t) has not expired, then at some instant
// between t and now K other keys held unexpired readings of at least v,
// and the key was refused or evicted then. The Gauge remembers nothing of
// a key it refused or evicted: if the key comes back, its new observation
// is judged as any newcomer's, and until then it is missing even if those
// K keys have since fallen below it.
//
// Time is an argument, and an instant earlier than the newest this Gauge
// has seen (in Observe or Top) is treated as that newest one; readings
// are then in time order, so the oldest reading is found in O(1).
//
// Observe costs O(log K) and never allocates. Memory, all allocated by
// NewGauge, is about 92 to 108 bytes per key plus the key strings, which
// the Gauge keeps as given (see Sketch.Add). Create a Gauge with NewGauge;
// the zero Gauge is not usable. It is safe for concurrent use.
type Gauge struct {
	seed   maphash.Seed
	maxAge time.Duration
	mu     sync.Mutex
	// Guarded by mu:
	last   time.Time // newest instant seen
	keys   table
	heap   minHeap[float64] // values
	at     []time.Time      // by slot
	newer  []int32          // by slot: the next newer slot in use, or -1
	older  []int32          // by slot: the next older slot in use, or -1
	newest int32            // -1 when no slot is in use
	oldest int32            // -1 when no slot is in use
	free   []int32          // slots not in use
}

// NewGauge validates p and returns an empty Gauge.
func NewGauge(p GaugeParams) (*Gauge, error) {
	if err := checkK(p.K); err != nil {
		return nil, err
	}
	if p.MaxAge <= 0 {
		return nil, fmt.Errorf("topk: max age must be positive, got %v", p.MaxAge)
	}
	g := &Gauge{
		seed:   maphash.MakeSeed(),
		maxAge: p.MaxAge,
		keys:   newTable(p.K),
		heap:   newMinHeap[float64](p.K),
		at:     make([]time.Time, p.K),
		newer:  make([]int32, p.K),
		older:  make([]int32, p.K),
		newest: -1,
		oldest: -1,
		free:   make([]int32, p.K),
	}
	for i := range g.free {
		g.free[i] = int32(p.K - 1 - i) // slot 0 is taken first
	}
	return g, nil
}

// Observe records v as key's latest value, at now. A NaN value is ignored
// (it has no rank). ±Inf are values like any other.
func (g *Gauge) Observe(key string, v float64, now time.Time) {
	if math.IsNaN(v) {
		return
	}
	t := tag(g.seed, key)
	g.mu.Lock()
	defer g.mu.Unlock()
	now = g.clamp(now)
	if i := g.keys.find(key, t); i >= 0 {
		g.heap.update(i, v)
		g.at[i] = now
		g.unlink(i)
		g.link(i)
		return
	}
	var i int32
	switch {
	case len(g.free) > 0:
		i = g.free[len(g.free)-1]
		g.free = g.free[:len(g.free)-1]
		g.keys.set(i, key, t)
		g.heap.push(i, v)
		g.at[i] = now
		g.link(i)
		return
	case g.expired(g.oldest, now):
		i = g.oldest
	case v > g.heap.min().v:
		i = g.heap.min().slot
	default:
		return
	}
	g.keys.remove(i)
	g.keys.set(i, key, t)
	g.heap.update(i, v)
	g.at[i] = now
	g.unlink(i)
	g.link(i)
}

// Top returns the n unexpired readings with the highest values (all of them
// if fewer, none if n ≤ 0), by Value descending and then by Key ascending.
// It first forgets the readings that have expired at now. The result is a
// new slice owned by the caller.
func (g *Gauge) Top(n int, now time.Time) []Reading {
	if n <= 0 {
		return nil
	}
	g.mu.Lock()
	now = g.clamp(now)
	for g.oldest >= 0 && g.expired(g.oldest, now) {
		g.drop(g.oldest)
	}
	rs := make([]Reading, 0, len(g.heap.nodes))
	for _, nd := range g.heap.nodes {
		rs = append(rs, Reading{Key: g.keys.keys[nd.slot], Value: nd.v, At: g.at[nd.slot]})
	}
	g.mu.Unlock()
	if len(rs) == 0 {
		return nil
	}
	slices.SortFunc(rs, func(a, b Reading) int {
		if c := cmp.Compare(b.Value, a.Value); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(rs) > n {
		rs = slices.Clip(rs[:n])
	}
	return rs
}

// clamp returns now, or the newest instant seen if now is before it, and
// records it as the newest. It requires g.mu held.
func (g *Gauge) clamp(now time.Time) time.Time {
	if now.Before(g.last) {
		return g.last
	}
	g.last = now
	return now
}

// expired reports whether slot i's reading has expired at now; i may be -1
// (none). It requires g.mu held.
func (g *Gauge) expired(i int32, now time.Time) bool {
	return i >= 0 && now.Sub(g.at[i]) >= g.maxAge
}

// drop forgets slot i's key and frees the slot. It requires g.mu held.
func (g *Gauge) drop(i int32) {
	g.unlink(i)
	g.heap.remove(i)
	g.keys.remove(i)
	g.at[i] = time.Time{}
	g.free = append(g.free, i) // within the capacity NewGauge made
}

// link makes slot i, which must not be linked, the newest. It requires g.mu
// held.
func (g *Gauge) link(i int32) {
	g.newer[i], g.older[i] = -1, g.newest
	if g.newest >= 0 {
		g.newer[g.newest] = i
	} else {
		g.oldest = i
	}
	g.newest = i
}

// unlink takes slot i out of the time order. It requires g.mu held.
func (g *Gauge) unlink(i int32) {
	n, o := g.newer[i], g.older[i]
	if n >= 0 {
		g.older[n] = o
	} else {
		g.newest = o
	}
	if o >= 0 {
		g.newer[o] = n
	} else {
		g.oldest = n
	}
}
