package topk

// minHeap is a binary min-heap of slot numbers ordered by a value kept in
// the node (so sifting reads one array), with each slot's position in pos,
// so that changing a slot's value costs O(log k). Values must be totally
// ordered by <: Gauge keeps NaN out. It is sized once and never allocates.
//
// A minHeap is not safe for concurrent use; its owner's mutex guards it.
type minHeap[V uint64 | float64] struct {
	nodes []node[V] // len = slots in use; cap k
	pos   []int32   // by slot: index in nodes; stale for a slot not in use
}

type node[V uint64 | float64] struct {
	v    V
	slot int32
}

func newMinHeap[V uint64 | float64](k int) minHeap[V] {
	return minHeap[V]{nodes: make([]node[V], 0, k), pos: make([]int32, k)}
}

// push adds slot with value v. The heap must not be full.
func (h *minHeap[V]) push(slot int32, v V) {
	h.nodes = append(h.nodes, node[V]{v: v, slot: slot})
	h.up(len(h.nodes) - 1)
}

// min returns the node with the smallest value. The heap must not be empty.
func (h *minHeap[V]) min() node[V] { return h.nodes[0] }

// value returns slot's value. The slot must be in the heap.
func (h *minHeap[V]) value(slot int32) V { return h.nodes[h.pos[slot]].v }

// update sets slot's value to v and restores the order.
func (h *minHeap[V]) update(slot int32, v V) {
	i := int(h.pos[slot])
	old := h.nodes[i].v
	h.nodes[i].v = v
	if v < old {
		h.up(i)
	} else {
		h.down(i)
	}
}

// remove takes slot out of the heap.
func (h *minHeap[V]) remove(slot int32) {
	i := int(h.pos[slot])
	last := len(h.nodes) - 1
	if i != last {
		moved := h.nodes[last]
		h.nodes[i] = moved
		h.pos[moved.slot] = int32(i)
		h.nodes = h.nodes[:last]
		// The moved node may belong above i or below it.
		if i > 0 && moved.v < h.nodes[(i-1)/2].v {
			h.up(i)
		} else {
			h.down(i)
		}
		return
	}
	h.nodes = h.nodes[:last]
}

func (h *minHeap[V]) up(i int) {
	x := h.nodes[i]
	for i > 0 {
		p := (i - 1) / 2
		if h.nodes[p].v <= x.v {
			break
		}
		h.nodes[i] = h.nodes[p]
		h.pos[h.nodes[i].slot] = int32(i)
		i = p
	}
	h.nodes[i] = x
	h.pos[x.slot] = int32(i)
}

func (h *minHeap[V]) down(i int) {
	n := len(h.nodes)
	x := h.nodes[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.nodes[r].v < h.nodes[c].v {
			c = r
		}
		if x.v <= h.nodes[c].v {
			break
		}
		h.nodes[i] = h.nodes[c]
		h.pos[h.nodes[i].slot] = int32(i)
		i = c
	}
	h.nodes[i] = x
	h.pos[x.slot] = int32(i)
}

// reset empties the heap.
func (h *minHeap[V]) reset() { h.nodes = h.nodes[:0] }
