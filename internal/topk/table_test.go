package topk

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestTableAgainstMap drives the key table with random set and remove
// operations, and tags drawn from a tiny range so that probe runs are long,
// collide and wrap around the end of the cell array; after each operation
// every key must be found in its slot, absent keys not at all, and every
// cell reachable from its home without crossing an empty cell (the
// invariant backward-shift deletion keeps).
func TestTableAgainstMap(t *testing.T) {
	for _, k := range []int{1, 2, 3, 8, 50} {
		t.Run(strconv.Itoa(k), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(k), 7))
			x := newTable(k)
			want := map[string]int32{} // key → slot
			tags := map[string]uint32{}
			tagOf := func(key string) uint32 {
				if tg, ok := tags[key]; ok {
					return tg
				}
				// Homes at the last cells, and a few high bits, so runs
				// wrap and tags of one home differ.
				tg := x.mask - uint32(r.IntN(3)) | uint32(r.IntN(4))<<20
				tags[key] = tg
				return tg
			}
			var freeSlots []int32
			for i := range k {
				freeSlots = append(freeSlots, int32(i))
			}
			for op := range 5_000 {
				key := "key" + strconv.Itoa(r.IntN(3*k+2))
				slot, tracked := want[key]
				switch {
				case tracked && r.IntN(2) == 0:
					x.remove(slot)
					delete(want, key)
					freeSlots = append(freeSlots, slot)
				case !tracked && len(freeSlots) > 0:
					i := r.IntN(len(freeSlots))
					slot = freeSlots[i]
					freeSlots = slices.Delete(freeSlots, i, i+1)
					x.set(slot, key, tagOf(key))
					want[key] = slot
				}
				for key, slot := range want {
					if got := x.find(key, tagOf(key)); got != slot {
						t.Fatalf("op %d: find(%q) = %d, want %d", op, key, got, slot)
					}
					if x.keys[slot] != key {
						t.Fatalf("op %d: keys[%d] = %q, want %q", op, slot, x.keys[slot], key)
					}
				}
				for i := range 3*k + 2 {
					key := "key" + strconv.Itoa(i)
					if _, ok := want[key]; !ok {
						if got := x.find(key, tagOf(key)); got != -1 {
							t.Fatalf("op %d: find(%q) = %d, want -1", op, key, got)
						}
					}
				}
				used := 0
				for p, c := range x.cells {
					if c.ref == 0 {
						continue
					}
					used++
					for q := c.tag & x.mask; q != uint32(p); q = (q + 1) & x.mask {
						if x.cells[q].ref == 0 {
							t.Fatalf("op %d: cell %d (home %d) cut off by empty cell %d", op, p, c.tag&x.mask, q)
						}
					}
				}
				if used != len(want) {
					t.Fatalf("op %d: %d cells used, want %d", op, used, len(want))
				}
			}
		})
	}
}

func TestNewTableSize(t *testing.T) {
	for _, c := range []struct{ k, cells int }{{1, 2}, {2, 4}, {3, 8}, {4, 8}, {5, 16}, {100, 256}, {MaxK, 2 * MaxK}} {
		if got := len(newTable(c.k).cells); got != c.cells {
			t.Errorf("newTable(%d): %d cells, want %d", c.k, got, c.cells)
		}
	}
}

// TestMinHeap checks the heap against sorting, through push, update and
// remove of arbitrary slots.
func TestMinHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const k = 40
	h := newMinHeap[float64](k)
	vals := map[int32]float64{}
	for op := range 20_000 {
		slot := int32(r.IntN(k))
		v := float64(r.IntN(30)) // ties on purpose
		if _, ok := vals[slot]; ok {
			if r.IntN(3) == 0 {
				h.remove(slot)
				delete(vals, slot)
			} else {
				h.update(slot, v)
				vals[slot] = v
			}
		} else {
			h.push(slot, v)
			vals[slot] = v
		}
		if len(h.nodes) != len(vals) {
			t.Fatalf("op %d: %d nodes, want %d", op, len(h.nodes), len(vals))
		}
		for i, nd := range h.nodes {
			if h.pos[nd.slot] != int32(i) {
				t.Fatalf("op %d: pos[%d] = %d, want %d", op, nd.slot, h.pos[nd.slot], i)
			}
			if nd.v != vals[nd.slot] {
				t.Fatalf("op %d: slot %d value %v, want %v", op, nd.slot, nd.v, vals[nd.slot])
			}
			if i > 0 && h.nodes[(i-1)/2].v > nd.v {
				t.Fatalf("op %d: node %d (%v) below a larger parent", op, i, nd.v)
			}
		}
	}
}
