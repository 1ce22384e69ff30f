package breaker

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBinOf(t *testing.T) {
	prev := 0
	for d := time.Duration(0); d < 80*time.Second; d = d*21/20 + 1 {
		i := binOf(d)
		if i < prev {
			t.Fatalf("binOf(%v) = %d, below binOf of a smaller latency (%d)", d, i, prev)
		}
		prev = i
		lo, hi := binBounds(i)
		if d < lo || (d >= hi && i != histBins-1) {
			t.Fatalf("binOf(%v) = %d with bounds [%v, %v)", d, i, lo, hi)
		}
		if i > 0 && i < histBins-1 {
			if w := float64(hi-lo) / float64(lo); w > 0.125 {
				t.Fatalf("bin %d [%v, %v) is %.1f%% wide", i, lo, hi, 100*w)
			}
		}
	}
	// Adjacent bins tile the range without gaps.
	for i := 1; i < histBins; i++ {
		_, hi := binBounds(i - 1)
		lo, _ := binBounds(i)
		if hi != lo {
			t.Fatalf("bin %d ends at %v but bin %d starts at %v", i-1, hi, i, lo)
		}
	}
	tests := []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 0},
		{0, 0},
		{65 * time.Microsecond, 0},
		{1 << histMinExp, 1},
		{100 * time.Microsecond, 1 + 4}, // 100µs = 1.526 × 2^16 ns
		{time.Minute, 1 + (35-histMinExp)*histSub + 5}, // 60s = 1.746 × 2^35 ns
		{1 << histMaxExp, histBins - 1},
		{time.Hour, histBins - 1},
	}
	for _, tt := range tests {
		if got := binOf(tt.d); got != tt.want {
			t.Errorf("binOf(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestP99Exceeds(t *testing.T) {
	// Against the definition: sort, take the sample at rank ceil(0.99 n).
	for n := 1; n <= 400; n++ {
		for s := 0; s <= min(n, 6); s++ {
			samples := make([]int, n)
			for i := n - s; i < n; i++ {
				samples[i] = 1 // above the threshold of 0
			}
			want := samples[p99Rank(uint64(n))-1] > 0
			if got := p99Exceeds(uint64(n), uint64(s)); got != want {
				t.Fatalf("p99Exceeds(n=%d, slow=%d) = %v, want %v", n, s, got, want)
			}
		}
	}
}

// TestEstimateP99 checks the estimate against the exact nearest-rank p99
// of random latency distributions: it lies in the exact p99's bin, so it
// is within 12.5% of it, and it is on the same side of the threshold.
func TestEstimateP99(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	thresholds := []time.Duration{time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond, 503 * time.Millisecond, 5 * time.Second}
	for trial := range 400 {
		n := 1 + rng.IntN(3000)
		median := time.Duration(math.Exp(rng.Float64()*12)) * time.Microsecond
		samples := make([]time.Duration, n)
		var h [histBins]uint64
		for i := range samples {
			d := time.Duration(float64(median) * math.Exp(rng.NormFloat64()*rng.Float64()))
			if rng.IntN(4) == 0 {
				d = median // many identical samples, as from a cache
			}
			samples[i] = d
			h[binOf(d)]++
		}
		slices.Sort(samples)
		exact := samples[p99Rank(uint64(n))-1]
		for _, th := range thresholds {
			var slowN uint64
			for _, d := range samples {
				if d > th {
					slowN++
				}
			}
			got := estimateP99(&h, uint64(n), slowN, th)
			if (got > th) != (exact > th) {
				t.Fatalf("trial %d: estimate %v and exact p99 %v disagree about threshold %v", trial, got, exact, th)
			}
			if exact > 1<<histMinExp && exact < 1<<histMaxExp {
				if err := math.Abs(float64(got-exact)) / float64(exact); err > 0.125 {
					t.Fatalf("trial %d: estimate %v is %.1f%% off the exact p99 %v", trial, got, 100*err, exact)
				}
			}
		}
	}
}

func TestEstimateP99Inconsistent(t *testing.T) {
	// Counters read while other goroutines write need not agree; the
	// estimate must still honour the decision.
	var h [histBins]uint64
	h[binOf(fast)] = 10
	if got := estimateP99(&h, 20, 1, 500*time.Millisecond); got <= 500*time.Millisecond {
		t.Errorf("estimate %v with a slow sample missing from the histogram, want above 500ms", got)
	}
	if got := estimateP99(&h, 5, 0, 500*time.Millisecond); binOf(got) != binOf(fast) {
		t.Errorf("estimate %v, want one in the bin of 10ms", got)
	}
	if got := estimateP99(&h, 0, 0, 500*time.Millisecond); got != 0 {
		t.Errorf("estimate of nothing = %v, want 0", got)
	}
}

func TestFormat(t *testing.T) {
	percents := []struct {
		v, threshold float64
		want         string
	}{
		{34.17, 20, "34%"},
		{20.21, 20, "20.2%"},
		{20.001, 20, "20.001%"},
		{19.6, 20, "20%"},
		{2.5, 0, "2.5%"},
		{20, 0, "20%"},
	}
	for _, tt := range percents {
		if got := formatPercent(tt.v, tt.threshold); got != tt.want {
			t.Errorf("formatPercent(%v, %v) = %q, want %q", tt.v, tt.threshold, got, tt.want)
		}
	}
	latencies := []struct {
		d, threshold time.Duration
		want         string
	}{
		{812345678, 500 * time.Millisecond, "812ms"},
		{500400000, 500 * time.Millisecond, "500.4ms"},
		{500000001, 500 * time.Millisecond, "500.000001ms"},
		{1234567890, 500 * time.Millisecond, "1.235s"},
		{850123, 500 * time.Millisecond, "850µs"},
		{0, 500 * time.Millisecond, "0s"},
	}
	for _, tt := range latencies {
		if got := formatLatency(tt.d, tt.threshold); got != tt.want {
			t.Errorf("formatLatency(%v, %v) = %q, want %q", tt.d, tt.threshold, got, tt.want)
		}
	}
}
