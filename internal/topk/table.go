package topk

import (
	"hash/maphash"
	"math/bits"
)

// table maps the keys of a structure's slots to their slot numbers, 0 up to
// k−1. It is an open-addressing hash table with linear probing, sized once
// (a power of two at least 2k, so the load never exceeds one half) and
// deleted from by backward shift (Knuth's Algorithm R), which leaves no
// tombstones: so it never grows, never allocates after newTable, and its
// probe sequences stay short however many keys come and go. A Go map would
// do the same job in fewer lines, but it may grow under steady churn (its
// tombstones are pruned only in part), and a replacement would hash three
// times (a lookup, a delete and an insert) where this hashes once.
//
// The table owns the slots' keys. Keys are hashed with maphash under a
// random seed per structure, so clients choosing their keys cannot collide
// them on purpose. The caller hashes (see tag) outside its lock.
//
// A table is not safe for concurrent use; its owner's mutex guards it.
type table struct {
	mask  uint32   // len(cells) − 1
	cells []cell   // len a power of two ≥ 2·len(keys)
	keys  []string // by slot; "" in an empty slot
	tags  []uint32 // by slot: the key's tag
}

// cell is one position of the probe array: 8 bytes.
type cell struct {
	tag uint32 // the key's tag; its low bits are the cell it hashes to
	ref int32  // slot + 1; 0 means an empty cell
}

// newTable returns an empty table for slots 0..k−1, k ≥ 1.
func newTable(k int) table {
	n := 2
	if k > 1 {
		n = 1 << bits.Len(uint(2*k-1)) // the least power of two ≥ 2k
	}
	return table{
		mask:  uint32(n - 1),
		cells: make([]cell, n),
		keys:  make([]string, k),
		tags:  make([]uint32, k),
	}
}

// tag hashes key for find and set. It touches no table state, so callers
// compute it before they take their lock.
func tag(seed maphash.Seed, key string) uint32 {
	return uint32(maphash.String(seed, key))
}

// find returns the slot holding key, whose tag is t, or −1.
func (x *table) find(key string, t uint32) int32 {
	for p := t & x.mask; ; p = (p + 1) & x.mask {
		c := x.cells[p]
		if c.ref == 0 {
			return -1
		}
		if c.tag == t && x.keys[c.ref-1] == key {
			return c.ref - 1
		}
	}
}

// set records that slot, which must hold no key, now holds key (tag t),
// which must not be in the table. The table keeps key itself, not a copy.
func (x *table) set(slot int32, key string, t uint32) {
	p := t & x.mask
	for x.cells[p].ref != 0 {
		p = (p + 1) & x.mask
	}
	x.cells[p] = cell{tag: t, ref: slot + 1}
	x.keys[slot], x.tags[slot] = key, t
}

// remove forgets the key of slot, which must hold one, and releases the
// string.
func (x *table) remove(slot int32) {
	p := x.tags[slot] & x.mask
	for x.cells[p].ref != slot+1 {
		p = (p + 1) & x.mask
	}
	// Backward shift: move each later cell of the run that may not sit
	// after the hole (its home is not cyclically in (hole, cell]) into it.
	hole := p
	for q := (p + 1) & x.mask; x.cells[q].ref != 0; q = (q + 1) & x.mask {
		home := x.cells[q].tag & x.mask
		if (q-home)&x.mask < (q-hole)&x.mask {
			continue // home lies in (hole, q]: the cell is still reachable
		}
		x.cells[hole] = x.cells[q]
		hole = q
	}
	x.cells[hole] = cell{}
	x.keys[slot], x.tags[slot] = "", 0
}

// reset empties the table, releasing every key.
func (x *table) reset() {
	clear(x.cells)
	clear(x.keys)
	clear(x.tags)
}
