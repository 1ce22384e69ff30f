package breaker

import (
	"sync/atomic"
	"time"
)

// numSlots is how many buckets a window is cut into. Thirty keeps the
// default 30s window at the 1s buckets the issue suggests, ages requests out
// in steps of 1/30 of any window, and bounds a breaker's memory (about 20 KB)
// whatever the window length.
const numSlots = 30

// cacheLine separates the fields every request reads from those it writes.
const cacheLine = 64

// never is the start of a slot that has not been used.
const never = -1 << 62

// slot counts the requests that finished in [start, start+width), where
// times are nanoseconds since the breaker's epoch. Writers only Add; a slot
// is zeroed (under the breaker's lock) when the ring comes back to it.
type slot struct {
	start atomic.Int64
	// counts holds the requests in its low 32 bits and the failures in its
	// high 32 bits, so one atomic add records both and returns a consistent
	// pair. A slot would need 4 billion requests to overflow.
	counts atomic.Uint64
	// slow counts requests slower than the p99 threshold.
	slow atomic.Uint64
	hist [histBins]atomic.Uint32
}

const failureOne = 1 << 32

func (s *slot) reset(start int64) {
	s.counts.Store(0)
	s.slow.Store(0)
	for i := range s.hist {
		s.hist[i].Store(0)
	}
	s.start.Store(start)
}

// window is a ring of slots covering length. Its geometry never changes;
// a new length gets a new window.
type window struct {
	length time.Duration
	width  int64 // nanoseconds per slot
	cur    atomic.Pointer[slot]
	// The totals of the slots before cur that are still in the window,
	// recomputed under the breaker's lock on every rotation, so that the hot
	// path checks a condition with one load per counter instead of a sum.
	pastRequests atomic.Uint64
	pastFailures atomic.Uint64
	pastSlow     atomic.Uint64
	_            [cacheLine]byte
	slots        [numSlots]slot
}

func newWindow(length time.Duration, at int64) *window {
	w := &window{length: length, width: max(1, int64(length)/numSlots)}
	for i := range w.slots {
		w.slots[i].start.Store(never)
	}
	s := w.slotFor(at)
	s.start.Store(w.startOf(at))
	w.cur.Store(s)
	return w
}

func (w *window) startOf(at int64) int64 {
	e := at / w.width
	if at < 0 && at%w.width != 0 {
		e--
	}
	return e * w.width
}

func (w *window) slotFor(at int64) *slot {
	i := (w.startOf(at) / w.width) % numSlots
	if i < 0 {
		i += numSlots
	}
	return &w.slots[i]
}

// totals is a sum over the slots of a window.
type totals struct {
	requests, failures, slow uint64
}

// sum adds up the slots whose start lies in [from, to], and merges their
// histograms into h if h is not nil.
func (w *window) sum(from, to int64, h *[histBins]uint64) totals {
	var t totals
	for i := range w.slots {
		s := &w.slots[i]
		if st := s.start.Load(); st < from || st > to {
			continue
		}
		c := s.counts.Load()
		t.requests += c & (failureOne - 1)
		t.failures += c >> 32
		t.slow += s.slow.Load()
		if h != nil {
			for j := range s.hist {
				h[j] += uint64(s.hist[j].Load())
			}
		}
	}
	return t
}

// at returns the totals of the window that ends with the slot holding at.
func (w *window) at(at int64, h *[histBins]uint64) totals {
	end := w.startOf(at)
	return w.sum(end-(numSlots-1)*w.width, end, h)
}

// reclassify recomputes every slot's slow count for a new p99 threshold
// from its histogram, counting the threshold's bin in proportion. Samples
// recorded before a p99_latency change are thus judged at bin resolution
// until they age out; later samples are compared exactly.
func (w *window) reclassify(threshold time.Duration) {
	tb := binOf(threshold)
	lo, hi := binBounds(tb)
	share := float64(hi-threshold) / float64(hi-lo)
	for i := range w.slots {
		s := &w.slots[i]
		var n uint64
		for j := tb + 1; j < histBins; j++ {
			n += uint64(s.hist[j].Load())
		}
		n += uint64(share*float64(s.hist[tb].Load()) + 0.5)
		s.slow.Store(n)
	}
}
