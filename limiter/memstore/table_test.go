package memstore

import (
	"math/rand/v2"
	"testing"
)

// TestTableAgainstMap applies random inserts, lookups and deletes to a table
// and to a map, with hashes crowded into few home slots so that probe runs
// are long and wrap around, and requires them to agree after every step.
func TestTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		var tab table[int]
		ref := map[uint64]int{}
		universe := 1 + rng.IntN(200)
		for step := range 3000 {
			h := uint64(1+rng.IntN(universe)) * 0x9E3779B97F4A7C15 >> (rng.IntN(2) * 40)
			h |= 1
			i, found := tab.find(h)
			_, inRef := ref[h]
			if found != inRef {
				t.Fatalf("round %d step %d: find(%x) = %v, map has it: %v", round, step, h, found, inRef)
			}
			switch {
			case found && rng.IntN(2) == 0:
				tab.deleteAt(i)
				delete(ref, h)
			case found:
				if tab.slots[i].s != ref[h] {
					t.Fatalf("round %d step %d: value %d, want %d", round, step, tab.slots[i].s, ref[h])
				}
				tab.slots[i].s++
				ref[h]++
			default:
				j := tab.insert(h)
				tab.slots[j].s = step
				ref[h] = step
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
			if !ok || tab.slots[i].s != v {
				t.Fatalf("round %d: lost %x", round, h)
			}
		}
		if tab.n > 0 && tab.n*5 > len(tab.slots)*4 {
			t.Fatalf("load %d/%d above 4/5", tab.n, len(tab.slots))
		}
	}
}
