package breaker

import (
	"math/bits"
	"time"
)

// The latency histogram is log-linear, as in HdrHistogram: each power of two
// of nanoseconds (an octave) is cut into histSub equal bins, so a bin is at
// most 1/histSub = 12.5% of its lower bound wide, and the bin of a latency is
// found with one bits.Len64 and a shift. Octaves 2^16 ns (65.5µs) to 2^36 ns
// (68.7s) give 160 bins; everything faster shares bin 0 and everything
// slower the last bin.
const (
	histSubBits = 3
	histSub     = 1 << histSubBits
	histMinExp  = 16
	histMaxExp  = 36
	histBins    = (histMaxExp-histMinExp)*histSub + 2
)

// binOf returns the histogram bin of d.
func binOf(d time.Duration) int {
	if d < 1<<histMinExp {
		return 0
	}
	if d >= 1<<histMaxExp {
		return histBins - 1
	}
	v := uint64(d)
	e := bits.Len64(v) - 1
	sub := int(v>>(e-histSubBits)) & (histSub - 1)
	return 1 + (e-histMinExp)<<histSubBits + sub
}

// binBounds returns the half-open range [lo, hi) of bin i. The last bin has
// no upper bound; hi is returned equal to lo.
func binBounds(i int) (lo, hi time.Duration) {
	switch {
	case i <= 0:
		return 0, 1 << histMinExp
	case i >= histBins-1:
		return 1 << histMaxExp, 1 << histMaxExp
	}
	j := i - 1
	e := histMinExp + j>>histSubBits
	sub := time.Duration(j & (histSub - 1))
	unit := time.Duration(1) << (e - histSubBits)
	return (histSub + sub) * unit, (histSub + sub + 1) * unit
}

// p99Rank is the nearest rank of the 99th percentile among n samples,
// ceil(0.99 n), counting from 1.
func p99Rank(n uint64) uint64 { return (99*n + 99) / 100 }

// p99Exceeds reports whether the 99th percentile of n samples, slow of
// which exceed the threshold, exceeds the threshold: the sample at rank
// ceil(0.99 n) is above it exactly when fewer than ceil(0.99 n) samples are
// at or below it, that is when slow > n - ceil(0.99 n) = floor(n/100).
func p99Exceeds(n, slow uint64) bool { return slow > n/100 }

// estimateP99 returns the 99th percentile of the merged histogram h, which
// holds n samples of which slow exceed threshold. The bin that contains the
// threshold is split at the threshold using the exact slow count, and the
// result is kept on the side of the threshold that p99Exceeds decides, so
// the number in a reason never contradicts the decision even when the
// counters moved while they were read. Within a bin the estimate is
// interpolated linearly by rank.
func estimateP99(h *[histBins]uint64, n, slow uint64, threshold time.Duration) time.Duration {
	if n == 0 {
		return 0
	}
	d := walkP99(h, p99Rank(n), slow, threshold)
	if p99Exceeds(n, slow) {
		return max(d, threshold+1)
	}
	return min(d, threshold)
}

func walkP99(h *[histBins]uint64, rank, slow uint64, threshold time.Duration) time.Duration {
	tb := binOf(threshold)
	var above uint64
	for _, c := range h[tb+1:] {
		above += c
	}
	// Samples of the threshold's bin that are above the threshold.
	slowIn := min(h[tb], slow-min(slow, above))

	var cum uint64
	find := func(lo, hi time.Duration, k uint64) (time.Duration, bool) {
		if cum+k < rank {
			cum += k
			return 0, false
		}
		if hi <= lo {
			return lo, true
		}
		frac := (float64(rank-cum) - 0.5) / float64(k)
		return lo + time.Duration(frac*float64(hi-lo)), true
	}
	for i := range h {
		lo, hi := binBounds(i)
		if i != tb {
			if d, ok := find(lo, hi, h[i]); ok {
				return d
			}
			continue
		}
		if d, ok := find(lo, threshold, h[i]-slowIn); ok {
			return d
		}
		if d, ok := find(threshold, hi, slowIn); ok {
			return d
		}
	}
	// Fewer samples than rank: the counts moved while they were read, and
	// the slowest sample seen is the best answer.
	for i := histBins - 1; i >= 0; i-- {
		if h[i] > 0 {
			lo, hi := binBounds(i)
			return max(lo, hi-1)
		}
	}
	return 0
}
