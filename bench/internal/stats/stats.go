// Package stats holds the summary statistics the benchmark tools share.
package stats

import "slices"

// Median returns the median of v, which must not be empty; v is not
// modified.
func Median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
