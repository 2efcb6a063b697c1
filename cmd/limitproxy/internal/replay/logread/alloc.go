package logread

import "strings"

// Allocation: a reader makes one string of each line and slices the
// record's strings from it, so that a line costs one allocation, plus one
// per value that had to be unescaped. The few strings with few distinct
// values are interned, so that a caller keeping them (as map keys, say)
// does not keep lines alive; Header and Extra slices are cut from a shared
// block.

// Interning stops at internMax distinct strings, and strings longer than
// internMaxLen are never interned: a log with a million hosts costs a
// bounded table, and then its lines' own substrings.
const (
	internMax    = 4096
	internMaxLen = 128
)

// interner returns one shared copy of each frequent string. Not safe for
// concurrent use.
type interner map[string]string

func (in interner) get(s string) string {
	if v, ok := in[s]; ok {
		return v
	}
	if len(in) >= internMax || len(s) > internMaxLen {
		return s
	}
	c := strings.Clone(s)
	in[c] = c
	return c
}

// cached is get with a one-entry cache in front of the map: last holds
// the last string returned for this field, which the next line most
// often repeats.
func (in interner) cached(last *string, s string) string {
	if s == *last {
		return *last
	}
	v := in.get(s)
	*last = v
	return v
}

// method returns a constant for the common methods, else the interned s.
func (in interner) method(s string) string {
	switch s {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "HEAD":
		return "HEAD"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "PATCH":
		return "PATCH"
	case "OPTIONS":
		return "OPTIONS"
	}
	return in.get(s)
}

// fieldBlock is how many Fields one block holds: the blocks are shared by
// the records of many lines, so a record that is kept keeps its block.
const fieldBlock = 1024

// fields hands out Field slices cut from shared blocks. Not safe for
// concurrent use.
type fields struct {
	block []Field
}

// clone returns a copy of fs whose capacity is its length, so that an
// append by the caller cannot write into another record's fields; nil if
// fs is empty.
func (f *fields) clone(fs []Field) []Field {
	if len(fs) == 0 {
		return nil
	}
	if cap(f.block)-len(f.block) < len(fs) {
		f.block = make([]Field, 0, max(fieldBlock, len(fs)))
	}
	n := len(f.block)
	f.block = append(f.block, fs...)
	return f.block[n : n+len(fs) : n+len(fs)]
}
