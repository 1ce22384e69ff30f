package tags

import "time"

// breaker is a consecutive-failure circuit breaker: after threshold failures
// in a row it opens and refuses calls for cooldown, then lets exactly one
// probe through (half-open); the probe's success closes it, its failure
// opens it for another cooldown. Any success closes it, since it proves the
// dependency answers. Not safe for concurrent use: Redis guards it with its
// mutex. Time is passed in so tests need not sleep.
type breaker struct {
	threshold int
	cooldown  time.Duration

	state     breakerState
	failures  int
	openUntil time.Time
	opens     uint64
}

type breakerState uint8

const (
	closed breakerState = iota
	open
	halfOpen // one probe is in flight
)

func (s breakerState) String() string {
	switch s {
	case closed:
		return "closed"
	case open:
		return "open"
	}
	return "half-open"
}

// allow reports whether a call may go ahead now. It moves an open breaker
// whose cooldown is over to half-open and lets that one caller probe.
func (b *breaker) allow(now time.Time) bool {
	switch b.state {
	case closed:
		return true
	case open:
		if now.Before(b.openUntil) {
			return false
		}
		b.state = halfOpen
		return true
	}
	return false
}

// success records a call that answered; it reports whether this closed the
// breaker.
func (b *breaker) success() (closedNow bool) {
	was := b.state
	b.state, b.failures = closed, 0
	return was != closed
}

// failure records a failed call; it reports whether this opened the breaker.
func (b *breaker) failure(now time.Time) (openedNow bool) {
	switch b.state {
	case closed:
		b.failures++
		if b.failures < b.threshold {
			return false
		}
	case open:
		return false // a straggler from before the breaker opened
	}
	b.state = open
	b.openUntil = now.Add(b.cooldown)
	b.opens++
	return true
}
