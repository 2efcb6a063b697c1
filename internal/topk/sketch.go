package topk

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
)

// MaxK bounds the k of every structure in this package: about 2^20 keys,
// 64 MiB of Sketch plus the keys themselves. The admin view needs
// tens or hundreds.
const MaxK = 1 << 20

// Entry is one key of a Sketch or Windowed: its estimated count and the
// bound of that estimate's error. The key's true count (the sum of the
// weights added for it) lies in [Count−Err, Count].
type Entry struct {
	Key   string
	Count uint64 // an upper bound of the key's true count
	Err   uint64 // Count minus a lower bound of the true count
}

// Sketch is a Space-Saving summary (see the package doc) of at most k keys:
// it finds every key whose weight exceeds N/k of the total N, in O(k)
// memory. Create it with New; the zero Sketch is not usable. A Sketch is
// safe for concurrent use: Add holds its mutex for O(log k) steps (it
// hashes the key before), Top for a copy of the k entries (it sorts after).
type Sketch struct {
	seed maphash.Seed
	mu   sync.Mutex
	s    summary // guarded by mu
}

// New returns an empty Sketch of k counters, 1 ≤ k ≤ MaxK. Its memory,
// all allocated here, is 64 to 80 bytes per counter plus the bytes
// of the keys it holds.
func New(k int) (*Sketch, error) {
	if err := checkK(k); err != nil {
		return nil, err
	}
	return &Sketch{seed: maphash.MakeSeed(), s: newSummary(k)}, nil
}

// Add adds w, the request's weight (1 for a plain count), to key's count.
// A key not tracked takes a free counter, with count w and error 0, if
// there is one; or else the counter with the smallest count m, whose old
// key it replaces, with count m+w and error m. Add(key, 0) does nothing.
// Counts and the total saturate at math.MaxUint64 (beyond which the bounds
// no longer hold).
//
// When key starts to be tracked the Sketch keeps the string itself, not a
// copy, until the key is evicted: no allocation, and none when a tracked
// key is added again. A key built on the heap for the request (as client
// keys are) is therefore free to keep; but a key that is a substring of a
// larger buffer keeps the whole buffer alive, so clone such a key first
// (strings.Clone). The Sketch stores and reports keys exactly as given:
// callers that must not expose raw client keys pass a hash of them.
func (s *Sketch) Add(key string, w uint64) {
	if w == 0 {
		return
	}
	t := tag(s.seed, key)
	s.mu.Lock()
	s.s.add(key, t, w)
	s.mu.Unlock()
}

// Top returns the n keys with the largest counts (all of them if fewer are
// tracked, none if n ≤ 0), by Count descending and then by Key ascending.
// The result is a new slice owned by the caller. Every key whose true count
// exceeds Total()/k is in Top(k).
func (s *Sketch) Top(n int) []Entry {
	if n <= 0 {
		return nil
	}
	s.mu.Lock()
	es := s.s.entries(nil)
	s.mu.Unlock()
	return sortTop(es, n)
}

// Total returns N, the sum of every weight added (saturating at
// math.MaxUint64). Each Entry's Err is at most Total()/k.
func (s *Sketch) Total() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s.total
}

// summary is the Space-Saving state behind Sketch and Windowed: k
// counters in slots 0..k−1, a table from key to slot, and a min-heap of
// slots by count. Slots are taken in order and, once k are in use, reused
// in place when evicted, so an update never allocates. The heap rather
// than Metwally et al.'s Stream-Summary lists: with weights, an increment
// can pass many count buckets, so Stream-Summary's O(1) step becomes
// O(buckets passed), while a heap stays O(log k).
//
// A summary is not safe for concurrent use.
type summary struct {
	total uint64
	keys  table
	heap  minHeap[uint64] // counts
	err   []uint64        // by slot: the count the key inherited
}

func newSummary(k int) summary {
	return summary{keys: newTable(k), heap: newMinHeap[uint64](k), err: make([]uint64, k)}
}

// add adds w > 0 to key, whose tag is t.
func (s *summary) add(key string, t uint32, w uint64) {
	s.total = satAdd(s.total, w)
	if i := s.keys.find(key, t); i >= 0 {
		s.heap.update(i, satAdd(s.heap.value(i), w))
		return
	}
	if n := len(s.heap.nodes); n < len(s.err) {
		i := int32(n)
		s.keys.set(i, key, t)
		s.err[i] = 0
		s.heap.push(i, w)
		return
	}
	m := s.heap.min()
	s.keys.remove(m.slot)
	s.keys.set(m.slot, key, t)
	s.err[m.slot] = m.v
	s.heap.update(m.slot, satAdd(m.v, w))
}

// floor returns the largest true count a key the summary does not track
// can have: the smallest count once all k counters are in use, 0 before.
func (s *summary) floor() uint64 {
	if len(s.heap.nodes) < len(s.err) {
		return 0
	}
	return s.heap.min().v
}

// entries appends the tracked keys to es, in no particular order.
func (s *summary) entries(es []Entry) []Entry {
	es = slices.Grow(es, len(s.heap.nodes))
	for _, nd := range s.heap.nodes {
		es = append(es, s.entry(nd))
	}
	return es
}

// entry returns the Entry of the slot of heap node nd.
func (s *summary) entry(nd node[uint64]) Entry {
	return Entry{Key: s.keys.keys[nd.slot], Count: nd.v, Err: s.err[nd.slot]}
}

// reset forgets every key and the total.
func (s *summary) reset() {
	s.total = 0
	s.keys.reset()
	s.heap.reset()
}

// sortTop sorts es by Count descending, then Key ascending, and returns its
// first n (n ≥ 1) entries, or nil if es is empty.
func sortTop(es []Entry, n int) []Entry {
	if len(es) == 0 {
		return nil
	}
	slices.SortFunc(es, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(es) > n {
		es = slices.Clip(es[:n])
	}
	return es
}

func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

func checkK(k int) error {
	if k < 1 || k > MaxK {
		return fmt.Errorf("topk: k must be in 1..%d, got %d", MaxK, k)
	}
	return nil
}
