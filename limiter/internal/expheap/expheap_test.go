package expheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type rec struct {
	exp int64
	pos int
}

func (r *rec) Expiry() int64  { return r.exp }
func (r *rec) Index() int     { return r.pos }
func (r *rec) SetIndex(i int) { r.pos = i }

// TestHeap against a sorted slice: random pushes, removals anywhere and
// changed expiries keep Heap[0] the soonest, every entry's index its
// place, and popping the head yields the expiries in order.
func TestHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Heap[*rec]
	var all []*rec
	check := func() {
		t.Helper()
		for i, r := range h {
			if r.pos != i {
				t.Fatalf("entry at %d says %d", i, r.pos)
			}
			if c := 2*i + 1; c < len(h) && h[c].exp < r.exp || c+1 < len(h) && h[c+1].exp < r.exp {
				t.Fatalf("heap order broken at %d", i)
			}
		}
	}
	for range 2000 {
		switch op := rng.IntN(4); {
		case op < 2 || len(all) == 0:
			r := &rec{exp: rng.Int64N(1000)}
			h.Push(r)
			all = append(all, r)
		case op == 2:
			k := rng.IntN(len(all))
			h.Remove(all[k].pos)
			all = slices.Delete(all, k, k+1)
		default:
			r := all[rng.IntN(len(all))]
			r.exp = rng.Int64N(1000)
			h.Fix(r.pos)
		}
		check()
	}
	want := make([]int64, 0, len(all))
	for _, r := range all {
		want = append(want, r.exp)
	}
	slices.Sort(want)
	for i := range want {
		if h[0].exp != want[i] {
			t.Fatalf("pop %d: %d, want %d", i, h[0].exp, want[i])
		}
		h.Remove(0)
	}
	if len(h) != 0 {
		t.Fatalf("%d left", len(h))
	}
}
