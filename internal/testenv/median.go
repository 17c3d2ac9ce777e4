package testenv

import "slices"

// Median is the middle of a benchmark's samples xs (the upper one of an
// even count; 0 when there are none). xs is left as it is.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}
