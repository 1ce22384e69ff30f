package traffic

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// LatencySchema names the latency bucket layout below. Counters are only
// summed with counters of the same schema; a gateway that changes the
// layout must change the number.
const LatencySchema = 1

// NumLatencyBuckets is the number of latency buckets: the bounded ones of
// LatencyBounds and one open-ended bucket after them.
const NumLatencyBuckets = numBounds + 1

// The bucket bounds are (4+s)<<o microseconds for octaves o = firstOctave
// .. lastOctave and s = 0..3: 128, 160, 192, 224, 256, 320, … µs up to
// 7<<22 µs (29.36 s). Consecutive bounds differ by a factor between 8/7
// and 5/4, and an index is found with one bits.Len64, without a search.
const (
	firstOctave = 5
	lastOctave  = 22
	numBounds   = (lastOctave - firstOctave + 1) * 4
	minBoundUS  = 4 << firstOctave
)

// LatencyBounds returns the upper bounds of the bounded latency buckets, in
// increasing order: bucket i counts latencies in (LatencyBounds()[i-1],
// LatencyBounds()[i]], bucket 0 everything up to 128 µs, and the last
// bucket (index len(LatencyBounds())) everything above 29.36 s. The bounds
// are fixed, so histograms of different gateways add bucket by bucket.
func LatencyBounds() []time.Duration {
	out := make([]time.Duration, numBounds)
	for i := range out {
		out[i] = boundOf(i)
	}
	return out
}

func boundOf(i int) time.Duration {
	o, s := firstOctave+i/4, i%4
	return time.Duration((4+s)<<o) * time.Microsecond
}

// latencyIndex is the bucket that counts latency d.
func latencyIndex(d time.Duration) int {
	if d <= minBoundUS*time.Microsecond {
		return 0
	}
	v := uint64((d + time.Microsecond - 1) / time.Microsecond) // ceil, in µs; > 128
	x := v - 1
	o := bits.Len64(x) - 3 // x>>o is in [4, 7]
	idx := (o-firstOctave)*4 + int(x>>o) - 4 + 1
	if idx > numBounds {
		return numBounds
	}
	return idx
}

// Counts are the counters of one time bucket, or the sum of several. The
// zero value is empty. Latency holds a count per latency bucket (see
// LatencyBounds); trailing empty buckets may be left out.
type Counts struct {
	Requests uint64   `json:"requests"`
	Errors   uint64   `json:"errors"`
	Latency  []uint64 `json:"latency,omitempty"`
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Requests += o.Requests
	c.Errors += o.Errors
	if len(o.Latency) > len(c.Latency) {
		c.Latency = append(c.Latency, make([]uint64, len(o.Latency)-len(c.Latency))...)
	}
	for i, n := range o.Latency {
		c.Latency[i] += n
	}
}

// Quantile returns the q-quantile (0 < q <= 1) of the latencies counted in
// c, read from the histogram: the upper bound of the bucket that holds the
// ⌈q·n⌉-th smallest latency. It is never below the true quantile and at
// most 25% above it, except that latencies up to 128 µs read as 128 µs and
// those over 29.36 s as 29.36 s. With nothing counted it returns 0.
func (c Counts) Quantile(q float64) time.Duration {
	var total uint64
	for _, n := range c.Latency {
		total += n
	}
	if total == 0 || !(q > 0) {
		return 0
	}
	rank := uint64(math.Ceil(min(q, 1) * float64(total)))
	rank = max(rank, 1)
	var seen uint64
	for i, n := range c.Latency {
		seen += n
		if seen >= rank {
			return boundOf(min(i, numBounds-1))
		}
	}
	return boundOf(numBounds - 1)
}

// trimmed returns c with trailing empty latency buckets dropped.
func (c Counts) trimmed() Counts {
	n := len(c.Latency)
	for n > 0 && c.Latency[n-1] == 0 {
		n--
	}
	c.Latency = c.Latency[:n:n]
	if n == 0 {
		c.Latency = nil
	}
	return c
}

// Stats summarize a window of one series.
type Stats struct {
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`
	// Seconds is the length of the window.
	Seconds float64 `json:"window_s"`
	// RPS is Requests per second of the window.
	RPS float64 `json:"rps"`
	// ErrorRate is Errors / Requests (0 without requests).
	ErrorRate float64 `json:"error_rate"`
	// P99Ms is Counts.Quantile(0.99) in milliseconds (0 without requests).
	P99Ms float64 `json:"p99_ms"`
	// Counts are the summed counters, for other quantiles.
	Counts Counts `json:"-"`
}

// P99 returns the 99th percentile latency of the window.
func (s Stats) P99() time.Duration { return s.Counts.Quantile(0.99) }

func statsOf(c Counts, window time.Duration) Stats {
	st := Stats{Requests: c.Requests, Errors: c.Errors, Seconds: window.Seconds(), Counts: c}
	if window > 0 {
		st.RPS = float64(c.Requests) / window.Seconds()
	}
	if c.Requests > 0 {
		st.ErrorRate = float64(c.Errors) / float64(c.Requests)
	}
	st.P99Ms = float64(c.Quantile(0.99)) / float64(time.Millisecond)
	return st
}

// Bucket is one time bucket of a series: the requests that ended in
// [Start, Start + width).
type Bucket struct {
	// Start is the bucket's start in Unix milliseconds.
	Start int64 `json:"start"`
	Counts
}

// Series are the buckets of one (rule, group), oldest first. Rule is ""
// for requests no rule claimed (group "default").
type Series struct {
	Rule    string   `json:"rule"`
	Group   string   `json:"group"`
	Buckets []Bucket `json:"buckets"`
}

// Export is the exportable form of a Set's counters: plain data that
// marshals to JSON, travels (a fleet of gateways publishes it) and adds up
// with Merge. Only buckets with requests are listed.
type Export struct {
	Schema  int   `json:"schema"`
	WidthMs int64 `json:"width_ms"`
	// End is where the exported buckets end, in Unix milliseconds: the
	// start of the bucket that was still filling. Merge keeps the latest.
	End    int64    `json:"end"`
	Series []Series `json:"series"`
}

// Window sums the buckets of (rule, group) that lie wholly in [end-d, end).
func (e Export) Window(rule, group string, end time.Time, d time.Duration) Stats {
	var c Counts
	from, to := end.Add(-d).UnixMilli(), end.UnixMilli()
	for _, s := range e.Series {
		if s.Rule != rule || s.Group != group {
			continue
		}
		for _, b := range s.Buckets {
			if b.Start >= from && b.Start+e.WidthMs <= to {
				c.Add(b.Counts)
			}
		}
	}
	return statsOf(c, d)
}

// Merge adds exports together: buckets of the same rule, group and start
// are summed. Every export must have the same schema and bucket width, and
// no more than NumLatencyBuckets latency buckets per bucket; otherwise
// Merge names the first offending field and returns no result.
func Merge(exports ...Export) (Export, error) {
	if len(exports) == 0 {
		return Export{Schema: LatencySchema}, nil
	}
	out := Export{Schema: exports[0].Schema, WidthMs: exports[0].WidthMs}
	if out.Schema != LatencySchema {
		return Export{}, fmt.Errorf("exports[0].schema: unknown latency schema %d, want %d", out.Schema, LatencySchema)
	}
	if out.WidthMs <= 0 {
		return Export{}, fmt.Errorf("exports[0].width_ms: must be positive, got %d", out.WidthMs)
	}
	type key struct {
		rule, group string
		start       int64
	}
	sums := map[key]*Counts{}
	for i, e := range exports {
		if e.Schema != out.Schema {
			return Export{}, fmt.Errorf("exports[%d].schema: %d, but exports[0] has %d", i, e.Schema, out.Schema)
		}
		if e.WidthMs != out.WidthMs {
			return Export{}, fmt.Errorf("exports[%d].width_ms: %d, but exports[0] has %d", i, e.WidthMs, out.WidthMs)
		}
		out.End = max(out.End, e.End)
		for j, s := range e.Series {
			for k, b := range s.Buckets {
				if len(b.Latency) > NumLatencyBuckets {
					return Export{}, fmt.Errorf("exports[%d].series[%d].buckets[%d].latency: %d buckets, at most %d", i, j, k, len(b.Latency), NumLatencyBuckets)
				}
				if b.Start%out.WidthMs != 0 {
					return Export{}, fmt.Errorf("exports[%d].series[%d].buckets[%d].start: %d is not a multiple of width_ms %d", i, j, k, b.Start, out.WidthMs)
				}
				kk := key{s.Rule, s.Group, b.Start}
				c := sums[kk]
				if c == nil {
					c = &Counts{}
					sums[kk] = c
				}
				c.Add(b.Counts)
			}
		}
	}
	keys := make([]key, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.rule, b.rule), cmp.Compare(a.group, b.group), cmp.Compare(a.start, b.start))
	})
	for _, k := range keys {
		n := len(out.Series)
		if n == 0 || out.Series[n-1].Rule != k.rule || out.Series[n-1].Group != k.group {
			out.Series = append(out.Series, Series{Rule: k.rule, Group: k.group})
			n++
		}
		out.Series[n-1].Buckets = append(out.Series[n-1].Buckets, Bucket{Start: k.start, Counts: sums[k].trimmed()})
	}
	return out, nil
}
