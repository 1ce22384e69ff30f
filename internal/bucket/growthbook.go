package bucket

import (
	"strconv"
	"unicode/utf16"
)

// FNV-1a 32-bit parameters (RFC draft-eastlake-fnv, as in hash/fnv).
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// fnvUTF16 continues FNV-1a 32-bit state h over the UTF-16 code units of s,
// as GrowthBook's JavaScript SDK hashes a string (hashFnv32a in
// packages/sdk-js/src/util.ts): it XORs each whole str.charCodeAt(i) — a
// code unit of up to 16 bits, not a byte — into the state and multiplies by
// the FNV prime (its shift-and-add is that multiplication modulo 2^32).
// hash/fnv hashes bytes, so it cannot express this; for strings of code
// units below 0x100 the two agree, which the tests check. A rune above the
// BMP is its surrogate pair; an invalid UTF-8 byte is U+FFFD, as a UTF-8
// decoder in front of the SDK would produce. Nothing is allocated: the units
// are hashed as they are produced.
func fnvUTF16(h uint32, s string) uint32 {
	for _, r := range s {
		if r < 0x10000 {
			h = (h ^ uint32(r)) * fnvPrime32
			continue
		}
		r1, r2 := utf16.EncodeRune(r)
		h = (h ^ uint32(r1)) * fnvPrime32
		h = (h ^ uint32(r2)) * fnvPrime32
	}
	return h
}

// growthBookOuter finishes hash version 2: fnv1a32(String(inner)) % 10000.
// String(inner) is the decimal form of an unsigned 32-bit number, ASCII
// digits, written into a stack buffer.
func growthBookOuter(inner uint32) uint32 {
	var buf [10]byte
	h := uint32(fnvOffset32)
	for _, c := range strconv.AppendUint(buf[:0], uint64(inner), 10) {
		h = (h ^ uint32(c)) * fnvPrime32
	}
	return h % 10000
}

// GrowthBookHash is GrowthBook's hash(seed, value, version): version 2 is
// fnv1a32(str(fnv1a32(seed + value))) % 10000 / 10000, version 1 (biased,
// kept by GrowthBook for old experiments) is fnv1a32(value + seed) % 1000 /
// 1000. Other versions are ok false, as the SDK returns null.
func GrowthBookHash(seed, value string, version int) (n float64, ok bool) {
	switch version {
	case 2:
		return float64(growthBookOuter(fnvUTF16(fnvUTF16(fnvOffset32, seed), value))) / 10000, true
	case 1:
		return float64(fnvUTF16(fnvUTF16(fnvOffset32, value), seed)%1000) / 1000, true
	}
	return 0, false
}

// BucketRanges is GrowthBook's getBucketRanges: numVariations half-open
// ranges of [0, 1), each starting at the cumulative weight and covering
// coverage times its weight. Coverage is clamped to [0, 1]; weights that are
// missing, of the wrong length, or that do not sum to 1 ± 0.01 become equal
// weights. Sums are taken in float64 in the SDK's order, so the bounds are
// the SDK's bit for bit.
func BucketRanges(numVariations int, coverage float64, weights []float64) [][2]float64 {
	coverage = min(max(coverage, 0), 1)
	if numVariations <= 0 {
		return nil
	}
	equal := make([]float64, numVariations)
	for i := range equal {
		equal[i] = 1 / float64(numVariations)
	}
	if len(weights) != numVariations {
		weights = equal
	}
	total := 0.0
	for _, w := range weights {
		total += w
	}
	if total < 0.99 || total > 1.01 {
		weights = equal
	}
	out := make([][2]float64, len(weights))
	cumulative := 0.0
	for i, w := range weights {
		start := cumulative
		cumulative += w
		out[i] = [2]float64{start, start + coverage*w}
	}
	return out
}

// ChooseVariation is GrowthBook's chooseVariation: the first range with
// start <= n < end, or -1.
func ChooseVariation(n float64, ranges [][2]float64) int {
	for i, r := range ranges {
		if n >= r[0] && n < r[1] {
			return i
		}
	}
	return -1
}

// firstBucketAtLeast returns the smallest bucket b in [0, 10000] whose
// n = b/10000 (computed as the SDK computes it) is >= x, turning a range
// bound into a bucket bound with the SDK's own float comparison.
func firstBucketAtLeast(x float64) uint64 {
	lo, hi := uint64(0), uint64(10000)
	for lo < hi {
		mid := (lo + hi) / 2
		if float64(mid)/10000 >= x {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
