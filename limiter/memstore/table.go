package memstore

import "math/bits"

// table is an open-addressing hash table with linear probing, keyed by a
// 64-bit hash of the client key (never the key itself, so a slot's size does
// not depend on the key's length). Slots hold the state inline: no pointer
// and no allocation per key. Capacity is not a power of two: the home slot
// is found by multiply-shift ("fastrange") and the table grows by 5/4 at a
// load of 4/5, so that at any size it is between 64% and 80% full (that is
// what keeps a 24-byte slot under 40 bytes per key). Deletion shifts later
// entries back instead of leaving tombstones.
//
// A table is not safe for concurrent use; its shard's lock guards it.
type table[S any] struct {
	slots []slot[S]
	n     int // occupied slots
}

// slot is one entry. Its word h holds the hash of the client key above the
// low countBits bits, which hold the entry's request count (see counted):
// the count takes bits of the hash rather than a field of its own, which
// would grow a 24-byte slot to 32 bytes (8 bytes a key more). A key's hash
// has its low countBits bits clear and is never 0 (Store.hash), so h is 0
// only in an empty slot.
type slot[S any] struct {
	h uint64
	s S
}

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
func (t *table[S]) home(h uint64) int {
	hi, _ := bits.Mul64((h&^countMask)<<shardBitsMax, uint64(len(t.slots)))
	return int(hi)
}

// find returns the position of h (a key's hash, count bits clear) and
// true, or false if h is absent.
func (t *table[S]) find(h uint64) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	for i := t.home(h); ; {
		switch w := t.slots[i].h; {
		case w == 0:
			return i, false
		case w&^countMask == h:
			return i, true
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// insert adds h (a key's hash, count bits clear), which must be absent,
// with a zero state and a count of 0, and returns its position. It may grow the table, moving every slot.
func (t *table[S]) insert(h uint64) int {
	if (t.n+1)*5 > len(t.slots)*4 {
		t.resize(max(minSlots, len(t.slots)+len(t.slots)/4+1))
	}
	i, _ := t.find(h)
	t.slots[i].h = h
	t.n++
	return i
}

// deleteAt removes the entry at i, moving back any entry of the same probe
// run that may now sit closer to its home.
func (t *table[S]) deleteAt(i int) {
	size := len(t.slots)
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		if t.slots[j].h == 0 {
			break
		}
		k := t.home(t.slots[j].h)
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot[S]{}
	t.n--
}

// resize rebuilds the table with size slots.
func (t *table[S]) resize(size int) {
	old := t.slots
	t.slots = make([]slot[S], size)
	t.n = 0
	for i := range old {
		if old[i].h != 0 {
			j, _ := t.find(old[i].h &^ countMask)
			t.slots[j] = old[i] // with its count
			t.n++
		}
	}
}

// shrink gives memory back after a flood of keys has gone idle.
func (t *table[S]) shrink() {
	switch {
	case t.n == 0:
		t.slots = nil
	case len(t.slots) > minSlots && t.n*5 < len(t.slots):
		t.resize(max(minSlots, t.n*3/2+1))
	}
}

// counted adds one request to the count in the slot word at w, unless it
// is saturated; nil (an entry not remembered) is ignored.
func counted(w *uint64) {
	if w != nil && *w&countMask != countMax {
		*w++
	}
}
