package rollout

import "time"

// Clock is the engine's time: when things happen and how long to wait.
// Tests use a fake one that they advance, so that a five-step plan runs in
// milliseconds without a sleep; the gateway uses the real one.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (RealClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
