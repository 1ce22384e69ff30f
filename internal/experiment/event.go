package experiment

import (
	"context"
	"math"
)

// Kind says what an Event records.
type Kind uint8

const (
	// Exposure is a unit's exposure to an experiment; only the first one
	// counts.
	Exposure Kind = iota + 1
	// Conversion is a binomial conversion or a value of a mean metric.
	Conversion
)

// Event is one exposure or conversion on its way to the store. The
// request path queues compact records and the writer turns them into
// Events; the events API makes them directly.
type Event struct {
	Kind       Kind
	Experiment string
	Unit       string
	// TS is when it happened, in Unix milliseconds: an exposure's request
	// start, a conversion's request start or event time.
	TS int64
	// Group and Version are an exposure's group and rule version.
	Group   string
	Version int64
	// Alloc is an exposure's allocation (Spec.alloc): a first exposure
	// counts in its experiment's current phase only if it was assigned
	// under the phase's allocation, at or after the phase began.
	Alloc uint64
	// Metric names a conversion's metric; Binomial says its type.
	Metric   string
	Binomial bool
	// Value is a mean metric's value in µ-units (millionths), so that sums
	// are exact integers and the same in any order.
	Value int64
	// Exposes marks a conversion made by a request the experiment's rule
	// claimed: the unit was exposed at TS at the latest, even if the
	// exposure recorded for it is of a concurrent request that started
	// later (and finished first). The store then keeps TS as the exposure.
	Exposes bool
}

// status is what the store did with one event.
type status uint8

const (
	stNone     status = iota
	stFresh           // a unit's first exposure
	stDup             // a repeated exposure, or a binomial unit that had converted
	stCounted         // a conversion that counted
	stOutside         // a conversion before the exposure or after the window
	stPending         // a conversion of a unit not (yet) exposed, parked
	stMaxUnits        // a first exposure refused: the store holds max_units
	stPendFull        // a conversion of an unexposed unit dropped: the park is full
	stOverflow        // a value that would overflow the unit's total
)

// Drop reasons, the reason label of graygate_experiment_events_dropped_total.
const (
	DropQueueFull        = "queue_full"        // the request path's queue had no room
	DropStoreUnavailable = "store_unavailable" // the store was down and the buffer full
	DropMaxUnits         = "max_units"         // experiments.max_units reached
	DropPendingFull      = "pending_full"      // too many conversions of unexposed units waiting
	DropBadValue         = "bad_value"         // a reported value that is not a finite number in range
	DropOverflow         = "overflow"          // a unit's total would overflow
	DropUnitTooLong      = "unit_too_long"     // a request's unit id is over MaxUnitBytes
	// DropNoExposure counts conversions that waited pendingTTL for their
	// unit's exposure in vain; with Redis, by the gateway whose batch
	// found the wait ended.
	DropNoExposure = "no_exposure"
)

var dropReasons = [...]string{DropQueueFull, DropStoreUnavailable, DropMaxUnits, DropPendingFull, DropBadValue, DropOverflow, DropUnitTooLong, DropNoExposure}

// counts are one experiment's integer aggregates.
type counts struct {
	// units is the number of exposed units per group.
	units map[string]int64
	// converted is the number of converted units per binomial metric and
	// group.
	converted map[metricGroup]int64
	// phase is the experiment's phase as stored (JSON, see phase; nil:
	// none yet), and phaseUnits the units per group first exposed in it
	// under its allocation (counted only while its since is set).
	phase      []byte
	phaseUnits map[string]int64
}

type metricGroup struct{ metric, group string }

// backend is where exposures and conversions are counted: the data dir
// (localStore) or Redis (redisStore). Methods are called by one goroutine
// at a time except counts and values, which results may call
// concurrently.
type backend interface {
	kind() string
	// apply records events in order: an exposure only if it is the
	// unit's first, a conversion only if the unit's first exposure is at
	// or before it and less than window milliseconds earlier (a
	// conversion of a unit not yet exposed waits for the exposure, for a
	// while). It sets st[i] for each event it handled and returns how many
	// it handled; on error the rest were not applied.
	apply(ctx context.Context, events []Event, window int64, st []status) (int, error)
	// sweepIdle drops the parked conversions whose wait has ended where no
	// apply would (an experiment, or a whole store, that no events come
	// for), and tells the store's expired callback how many. The writer
	// calls it at every flush; it does nothing until a wait has ended,
	// and at most once a second. experiments lists the catalog's
	// experiments, for a store a fleet shares (see redisStore.sweepIdle).
	sweepIdle(ctx context.Context, experiments func() []string) error
	counts(ctx context.Context, exp string) (counts, error)
	// setPhase replaces the experiment's phase with next if it is still
	// old (compare and set, so that a fleet's gateways agree), and
	// reports whether it did. With reset, the phase's unit counts start
	// again from 0 and count, from then on, the first exposures of
	// allocation alloc dated at or after since (Unix ms; 0 counts none).
	setPhase(ctx context.Context, exp string, old, next []byte, since int64, alloc uint64, reset bool) (bool, error)
	// values calls fn with every unit's non-zero total of a mean metric.
	values(ctx context.Context, exp, metric string, fn func(group string, total int64)) error
	close() error
}

// addExact returns a+b, or false when it overflows int64.
func addExact(a, b int64) (int64, bool) {
	s := a + b
	if (s > a) != (b > 0) {
		return 0, false
	}
	return s, true
}

// MaxValue bounds one reported or posted value of a mean metric.
const MaxValue = 1e12

// micro converts a value to µ-units; ok is false for NaN, ±Inf and values
// beyond ±MaxValue.
func micro(v float64) (int64, bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > MaxValue {
		return 0, false
	}
	return int64(math.Round(v * 1e6)), true
}
