package stats

import "math"

// Percentile returns the nearest-rank p-quantile (0 < p ≤ 1) of sorted,
// which must be sorted ascending and not empty: the smallest value that at
// least a share p of the values are at or below. Percentile(s, 0.5) of an
// even count is the lower middle value, Percentile(s, 1) the maximum.
func Percentile[T ~int64 | ~float64](sorted []T, p float64) T {
	k := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}
