package memstore

import (
	"math"
	"math/bits"
	"time"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// table holds one limit's keys in one shard: an open-addressing hash
// table with linear probing, keyed by a 64-bit hash of the client key
// (never the key itself, so a slot's size does not depend on the key's
// length). Slot i is words[i], the key's hash and request count, and
// state i of states, the key's state in the layout of the limit's
// algorithm (driver.States: 16 bytes for a token bucket), held inline:
// no pointer and no allocation per key, and nothing here depends on the
// algorithm. The words are probed alone, 8 to a cache line. Capacity is
// not a power of two: the home slot is found by multiply-shift
// ("fastrange") and the table grows by 5/4 at a load of 4/5, so that at
// any size it is between 64% and 80% full (that is what keeps a token
// bucket's 24 bytes a slot under 40 bytes per key). Deletion shifts later
// entries back instead of leaving tombstones.
//
// A table is not safe for concurrent use; its shard's lock guards it.
type table struct {
	lim    *driver.Limit // the parameters last used, for the janitor
	words  []uint64      // by slot: the hash and request count (below)
	states driver.States // by slot, as many as words
	// queues, for a queued limit (a leaky bucket), holds each slot's
	// queue, nil while none; nil for the other limits.
	queues []*leakyQueue
	queued bool
	n      int // occupied slots
}

// newTable returns an empty table for lim's state.
func newTable(lim *driver.Limit) *table {
	return &table{lim: lim, states: lim.NewStates(0), queued: lim.Queued()}
}

// A slot's word holds the hash of the client key above the low countBits
// bits, which hold the entry's request count (see counted): the count
// takes bits of the hash rather than a field of its own, which would grow
// a 24-byte slot to 32 bytes (8 bytes a key more). A key's hash has its
// low countBits bits clear and is never 0 (Store.hash), so a word is 0
// only in an empty slot.

// countBits is how many low bits of a slot's word count the requests
// charged to the entry since it was inserted, saturating at countMax.
// They are taken from the hash: of a key's 64-bit hash, 56 bits are kept,
// the top bits of which choose the shard, so keys of one shard are told
// apart by 48 to 56 bits (two keys sharing a hash share their state).
const countBits = 8

const (
	countMask = 1<<countBits - 1
	countMax  = countMask // the count saturates there
)

const minSlots = 8

// home returns the preferred position of hash h (a slot's word: its count
// bits are ignored). The top bits of h chose the shard, so they are
// shifted out first.
func (t *table) home(h uint64) int {
	hi, _ := bits.Mul64((h&^countMask)<<shardBitsMax, uint64(len(t.words)))
	return int(hi)
}

// find returns the position of h (a key's hash, count bits clear) and
// true, or false if h is absent.
func (t *table) find(h uint64) (int, bool) {
	if len(t.words) == 0 {
		return 0, false
	}
	for i := t.home(h); ; {
		switch w := t.words[i]; {
		case w == 0:
			return i, false
		case w&^countMask == h:
			return i, true
		}
		if i++; i == len(t.words) {
			i = 0
		}
	}
}

// insert adds h (a key's hash, count bits clear), which must be absent,
// with a fresh state and a count of 0, and returns its position. It may
// grow the table, moving every slot.
func (t *table) insert(h uint64) int {
	if (t.n+1)*5 > len(t.words)*4 {
		t.resize(max(minSlots, len(t.words)+len(t.words)/4+1))
	}
	i, _ := t.find(h)
	t.words[i] = h
	t.n++
	return i
}

// deleteAt removes the entry at i, moving back any entry of the same probe
// run that may now sit closer to its home.
func (t *table) deleteAt(i int) {
	t.states.Clear(i)
	if t.queued {
		t.queues[i] = nil
	}
	size := len(t.words)
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		if t.words[j] == 0 {
			break
		}
		k := t.home(t.words[j])
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.words[i] = t.words[j] // with its count
		t.states.Move(i, j)     // leaves j fresh
		if t.queued {
			t.queues[i], t.queues[j] = t.queues[j], nil
		}
		i = j
	}
	t.words[i] = 0
	t.n--
}

// resize rebuilds the table with size slots.
func (t *table) resize(size int) {
	old, oldStates, oldQueues := t.words, t.states, t.queues
	t.words = make([]uint64, size)
	t.states = oldStates.Make(size)
	if t.queued {
		t.queues = make([]*leakyQueue, size)
	}
	t.n = 0
	for i, w := range old {
		if w != 0 {
			j, _ := t.find(w &^ countMask)
			t.words[j] = w // with its count
			t.states.Copy(j, oldStates, i)
			if t.queued {
				t.queues[j] = oldQueues[i]
			}
			t.n++
		}
	}
}

// shrink gives memory back after a flood of keys has gone idle.
func (t *table) shrink() {
	switch {
	case t.n == 0:
		t.words, t.states, t.queues = nil, t.states.Make(0), nil
	case len(t.words) > minSlots && t.n*5 < len(t.words):
		t.resize(max(minSlots, t.n*3/2+1))
	}
}

// size returns the table's capacity in slots.
func (t *table) size() int { return len(t.words) }

// count returns the entries of the table.
func (t *table) count() int { return t.n }

// hashAt returns the hash stored at position i (0 if empty).
func (t *table) hashAt(i int) uint64 { return t.words[i] &^ countMask }

// requestsAt returns how many requests were charged to the entry at
// position i since it was inserted, at most countMax.
func (t *table) requestsAt(i int) int64 { return int64(t.words[i] & countMask) }

// queueAt returns the queue of the entry at position i, nil if none.
func (t *table) queueAt(i int) *leakyQueue {
	if !t.queued {
		return nil
	}
	return t.queues[i]
}

// left returns what the entry at position i has left of its limit at now
// (Unix ns) after a request of weight 1 (the decision's Remaining), or
// -1 if it would refuse that request (the key is spent). Not for a busy
// queue.
func (t *table) left(i int, now int64) int64 {
	var q *driver.Queue
	if wq := t.queueAt(i); wq != nil {
		q = wq.describeIdle()
	}
	d := t.lim.Peek(t.states, i, q, time.Unix(0, now), 1)
	if !d.Allowed {
		return -1
	}
	return d.Remaining
}

// idleAt returns when the entry at position i becomes fresh (Unix ns);
// math.MaxInt64 for an entry that must not be dropped (a busy queue:
// requests wait), math.MinInt64 for a fresh one.
func (t *table) idleAt(i int) int64 {
	var q *driver.Queue
	if wq := t.queueAt(i); wq != nil {
		if wq.busy {
			return math.MaxInt64
		}
		q = wq.describeIdle()
	}
	at := t.lim.IdleAt(t.states, i, q)
	if at.IsZero() {
		return math.MinInt64
	}
	return at.UnixNano()
}

// counted adds one request to the count in the slot word at w, unless it
// is saturated; nil (an entry not remembered) is ignored.
func counted(w *uint64) {
	if w != nil && *w&countMask != countMax {
		*w++
	}
}
