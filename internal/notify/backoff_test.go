package notify

import (
	"net/http"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 30 * time.Second}
	tests := []struct {
		name    string
		b       Backoff
		attempt int
		u       float64
		want    time.Duration
	}{
		{"first, no jitter", b, 1, 0, 500 * time.Millisecond},
		{"first, half jitter", b, 1, 0.5, 750 * time.Millisecond},
		{"first, u just below 1 stays below d", b, 1, 0.9999999999999999, time.Second - 1},
		{"u of 1 is clamped below d", b, 1, 1, time.Second - 1},
		{"negative u is 0", b, 1, -3, 500 * time.Millisecond},
		{"attempt 0 is the first", b, 0, 0, 500 * time.Millisecond},
		{"second doubles", b, 2, 0, time.Second},
		{"fifth", b, 5, 0, 8 * time.Second},
		{"sixth hits the cap", b, 6, 0, 15 * time.Second},
		{"the cap holds with jitter", b, 6, 0.5, 22500 * time.Millisecond},
		{"a huge attempt does not overflow", b, 1000, 0, 15 * time.Second},
		{"a shift that would overflow is the cap", Backoff{Base: time.Hour, Max: 3 * time.Hour}, 40, 0, 90 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Delay(tt.attempt, tt.u); got != tt.want {
				t.Errorf("Delay(%d, %v) = %s, want %s", tt.attempt, tt.u, got, tt.want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name, h string
		want    time.Duration
		ok      bool
	}{
		{"absent", "", 0, false},
		{"seconds", "7", 7 * time.Second, true},
		{"spaces", " 12 ", 12 * time.Second, true},
		{"zero", "0", 0, true},
		{"negative", "-1", 0, false},
		{"fraction", "1.5", 0, false},
		{"garbage", "soon", 0, false},
		{"huge is capped, not wrapped", "99999999999999999999", 0, false},
		{"large", "9223372036", 9223372036 * time.Second, true},
		{"past the int64 of nanoseconds", "9223372037", time.Duration(9223372036) * time.Second, true},
		{"date ahead", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"date past", now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := retryAfter(tt.h, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("retryAfter(%q) = %s %v, want %s %v", tt.h, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// FuzzRetryAfter: a receiver's Retry-After header is outside input; it
// never panics and never gives a negative wait.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"7", "0", "-1", "Sun, 06 Nov 1994 08:49:37 GMT", "99999999999999999999", "9223372037", ""} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, h string) {
		if d, ok := retryAfter(h, now); d < 0 || (!ok && d != 0) {
			t.Fatalf("retryAfter(%q) = %s %v", h, d, ok)
		}
	})
}
