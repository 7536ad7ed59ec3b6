package stats

import (
	"cmp"
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
	keys := make([]uint64, len(xs))
	for i, x := range xs {
		keys[i] = orderedBits(x)
	}
	keys, _ = radixSort(keys, nil)
	for i, k := range keys {
		if k>>63 == 1 {
			k &^= 1 << 63
		} else {
			k = ^k
		}
		xs[i] = math.Float64frombits(k)
	}
}

// sortedOrder returns the positions of xs's values other than NaN, ordered
// by value (ties in any order): the radix sort of sortFloats, carrying
// each key's position (Spearman ranks two columns of every request of a
// window; comparison sorting them was a third of a diagnosis's Go time).
func sortedOrder(xs []float64) []int32 {
	idx := make([]int32, 0, len(xs))
	for i, x := range xs {
		if !math.IsNaN(x) {
			idx = append(idx, int32(i))
		}
	}
	if len(idx) < radixMin {
		slices.SortFunc(idx, func(a, b int32) int { return cmp.Compare(xs[a], xs[b]) })
		return idx
	}
	keys := make([]uint64, len(idx))
	for j, i := range idx {
		keys[j] = orderedBits(xs[i])
	}
	_, idx = radixSort(keys, idx)
	return idx
}

// orderedBits maps a float (no NaN) to a uint64 ordered like it: every bit
// of a negative flipped, only the sign bit of a positive. -0 sorts before
// +0, which are equal as floats.
func orderedBits(x float64) uint64 {
	k := math.Float64bits(x)
	if k>>63 == 1 {
		return ^k
	}
	return k | 1<<63
}

// radixSort sorts keys ascending by an LSD radix sort, byte by byte, moving
// idx (when not nil) along with them; it returns both sorted (in either
// the given slices or new ones).
func radixSort(keys []uint64, idx []int32) ([]uint64, []int32) {
	var counts [8][256]int
	for _, k := range keys {
		for d := range 8 {
			counts[d][byte(k>>(8*d))]++
		}
	}
	tmpK := make([]uint64, len(keys))
	var tmpI []int32
	if idx != nil {
		tmpI = make([]int32, len(idx))
	}
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
		for j, k := range keys {
			b := byte(k >> shift)
			tmpK[c[b]] = k
			if idx != nil {
				tmpI[c[b]] = idx[j]
			}
			c[b]++
		}
		keys, tmpK = tmpK, keys
		idx, tmpI = tmpI, idx
	}
	return keys, idx
}
