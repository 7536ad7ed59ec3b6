package stats

import (
	"math"
	"slices"
)

// radixMin is the smallest sample sorted by radix: below it the counting
// passes cost more than comparison sorting saves.
const radixMin = 512

// sortFloats sorts xs (no NaN) ascending. A diagnosis sorts a few dozen
// columns of tens of thousands of latencies, and comparison sorting them
// was half its time; an LSD radix sort over the IEEE bits does the same in
// a quarter of it (BenchmarkSort).
func sortFloats(xs []float64) {
	if len(xs) < radixMin {
		slices.Sort(xs)
		return
	}
	// Map each float to a uint64 ordered like it: flip every bit of a
	// negative, only the sign bit of a positive. -0 sorts before +0,
	// which are equal as floats.
	keys := make([]uint64, len(xs))
	var counts [8][256]int
	for i, x := range xs {
		k := math.Float64bits(x)
		if k>>63 == 1 {
			k = ^k
		} else {
			k |= 1 << 63
		}
		keys[i] = k
		for d := range 8 {
			counts[d][byte(k>>(8*d))]++
		}
	}
	tmp := make([]uint64, len(keys))
	for d := range 8 {
		c := &counts[d]
		if c[byte(keys[0]>>(8*d))] == len(keys) {
			continue // every key has the same byte here: nothing moves
		}
		pos := 0
		for b := range c {
			pos, c[b] = pos+c[b], pos
		}
		shift := 8 * d
		for _, k := range keys {
			b := byte(k >> shift)
			tmp[c[b]] = k
			c[b]++
		}
		keys, tmp = tmp, keys
	}
	for i, k := range keys {
		if k>>63 == 1 {
			k &^= 1 << 63
		} else {
			k = ^k
		}
		xs[i] = math.Float64frombits(k)
	}
}
