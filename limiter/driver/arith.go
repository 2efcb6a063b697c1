package driver

import (
	"math"
	"math/bits"
)

// Integer helpers. Every algorithm works on int64 nanoseconds and integer
// counts so that its decisions are exact; products that can exceed 64 bits
// (a count times a window in nanoseconds) go through 128-bit intermediates.

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDiv returns ⌊a/b⌋ for any a and b > 0 (Go's / truncates toward zero).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// mod returns a mod b in [0, b) for b > 0.
func mod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// mulDiv returns ⌊a·b/c⌋ for non-negative a, b and c > 0, saturating at
// math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// mulDivCeil returns ⌈a·b/c⌉ for non-negative a, b and c > 0, saturating at
// math.MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// satAdd returns a+b for b ≥ 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// u128 is an unsigned 128-bit integer, used to compare weighted sums exactly:
// a sliding window compares count × slot length, which for a limit of 10⁹
// over a window of a day is about 8.6·10²², past int64.
type u128 struct{ hi, lo uint64 }

func mul128(a, b int64) u128 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

// sub returns x−y for x ≥ y.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

// div returns ⌊x/d⌋ for d > 0, saturating at math.MaxInt64.
func (x u128) div(d int64) int64 {
	if x.hi >= uint64(d) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(x.hi, x.lo, uint64(d))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
