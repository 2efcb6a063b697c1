package memstore

import (
	"math/rand/v2"
	"testing"

	"github.com/limitproxy/limitproxy/limiter/driver"
)

// ints is a driver.States of plain numbers, so that a table's moves can
// be checked against a map.
type ints []int

func (a ints) Make(n int) driver.States                  { return make(ints, n) }
func (a ints) Copy(dst int, from driver.States, src int) { a[dst] = from.(ints)[src] }
func (a ints) Move(dst, src int)                         { a[dst], a[src] = a[src], 0 }
func (a ints) Clear(i int)                               { a[i] = 0 }

// TestTableAgainstMap applies random inserts, lookups and deletes to a table
// and to a map, with hashes crowded into few home slots so that probe runs
// are long and wrap around, and requires them to agree after every step.
func TestTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		tab := &table{states: ints{}}
		ref := map[uint64]int{}
		reqs := map[uint64]uint64{} // the count each entry should hold
		universe := 1 + rng.IntN(200)
		for step := range 3000 {
			h := uint64(1+rng.IntN(universe)) * 0x9E3779B97F4A7C15 >> (rng.IntN(2) * 40)
			h = h&^countMask | 1<<countBits // a key's hash: count bits clear, never 0
			i, found := tab.find(h)
			_, inRef := ref[h]
			if found != inRef {
				t.Fatalf("round %d step %d: find(%x) = %v, map has it: %v", round, step, h, found, inRef)
			}
			switch {
			case found && rng.IntN(2) == 0:
				tab.deleteAt(i)
				delete(ref, h)
				delete(reqs, h)
			case found:
				if tab.states.(ints)[i] != ref[h] {
					t.Fatalf("round %d step %d: value %d, want %d", round, step, tab.states.(ints)[i], ref[h])
				}
				if c := tab.words[i] & countMask; c != reqs[h] {
					t.Fatalf("round %d step %d: count %d, want %d", round, step, c, reqs[h])
				}
				tab.states.(ints)[i]++
				ref[h]++
				counted(&tab.words[i])
				reqs[h] = min(reqs[h]+1, countMax)
			default:
				j := tab.insert(h)
				tab.states.(ints)[j] = step
				ref[h] = step
				reqs[h] = 0
			}
			if tab.n != len(ref) {
				t.Fatalf("round %d step %d: n = %d, want %d", round, step, tab.n, len(ref))
			}
			if step%500 == 0 {
				tab.shrink()
			}
		}
		for h, v := range ref {
			i, ok := tab.find(h)
			if !ok || tab.states.(ints)[i] != v || tab.words[i]&countMask != reqs[h] {
				t.Fatalf("round %d: lost %x", round, h)
			}
		}
		if tab.n > 0 && tab.n*5 > len(tab.words)*4 {
			t.Fatalf("load %d/%d above 4/5", tab.n, len(tab.words))
		}
	}
}

// TestCountedSaturates: a slot's request count stops at countMax and
// never carries into the hash; a nil word (an entry not remembered) is
// ignored.
func TestCountedSaturates(t *testing.T) {
	const h = 0xABCD << countBits
	w := uint64(h)
	for range countMax + 10 {
		counted(&w)
	}
	if w&^countMask != h || w&countMask != countMax {
		t.Fatalf("after %d requests the word is %#x, want hash %#x with count %d", countMax+10, w, h, countMax)
	}
	counted(nil)
}
