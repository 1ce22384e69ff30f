package notify

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Backoff is exponential backoff with "equal jitter": after the n-th
// failed attempt (n from 1) the wait is d/2 + u·d/2, where d =
// min(Max, Base·2^(n-1)) and u is uniform in [0, 1). The jitter spreads the
// retries of many gateways that lost the same receiver at the same moment
// (see "Exponential Backoff And Jitter", AWS Architecture Blog, 2015); the
// half that is not jittered keeps every wait at least d/2, so a receiver
// that is down is not hit again at once.
type Backoff struct {
	// Base is the wait's scale after the first failure (default 1s).
	Base time.Duration
	// Max caps every wait, including one a Retry-After header asks for
	// (default 30s).
	Max time.Duration
}

// Delay returns the wait after the attempt-th failed attempt, given u in
// [0, 1) (values outside are clamped).
func (b Backoff) Delay(attempt int, u float64) time.Duration {
	d := b.Max
	if attempt < 1 {
		attempt = 1
	}
	if shift := attempt - 1; shift < 62 {
		if e := b.Base << shift; e > 0 && e>>shift == b.Base && e < b.Max {
			d = e
		}
	}
	u = min(max(u, 0), 1)
	half := d / 2
	j := time.Duration(u * float64(d-half))
	if j >= d-half && d-half > 0 {
		j = d - half - 1 // u is below 1: the wait stays below d
	}
	return half + j
}

// retryAfter reads a Retry-After header (RFC 9110 §10.2.3): a number of
// seconds or an HTTP-date, relative to now. ok is false when the header is
// absent or malformed, or names a time already past.
func retryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if h[0] >= '0' && h[0] <= '9' {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || n < 0 {
			return 0, false
		}
		const maxSeconds = int64(1<<63-1) / int64(time.Second)
		if n > maxSeconds {
			n = maxSeconds
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return d, true
	}
	return 0, false
}
