// Package expheap is the min-heap by expiry in which both stores keep the
// penalty box's records (memstore.Bans, and redisstore.Bans's mirror), so
// that the soonest to expire is dropped first, in O(log n): each record
// knows its place in the heap (container/heap's pattern, written out
// without its interface conversions). Not safe for concurrent use: the
// stores hold it under their shards' locks.
package expheap

// Entry is what a Heap holds: a record with an expiry (any ordered
// instant, e.g. Unix ns) that remembers its index in the heap.
type Entry interface {
	Expiry() int64
	Index() int
	SetIndex(int)
}

// Heap is a min-heap of entries by Expiry: Heap[0] expires first. The
// zero Heap is empty and ready to use.
type Heap[E Entry] []E

// Push adds e.
func (h *Heap[E]) Push(e E) {
	e.SetIndex(len(*h))
	*h = append(*h, e)
	h.up(e.Index())
}

// Remove removes the entry at index i.
func (h *Heap[E]) Remove(i int) {
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero E
	(*h)[last] = zero
	*h = (*h)[:last]
	if i != last {
		h.Fix(i)
	}
}

// Fix restores the order after the expiry of the entry at i changed.
func (h Heap[E]) Fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h Heap[E]) less(i, j int) bool { return h[i].Expiry() < h[j].Expiry() }

func (h Heap[E]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].SetIndex(i)
	h[j].SetIndex(j)
}

func (h Heap[E]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h Heap[E]) down(i int) bool {
	start := i
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if r := c + 1; r < len(h) && h.less(r, c) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
