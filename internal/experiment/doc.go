// Package experiment records exposures and conversions per experiment and unit, and serves results.
//
// # What is counted
//
// A unit (the request's identity value) is exposed to an ab rule's
// experiment the first time the rule claims one of its requests; the
// first exposure's time, group and rule version are kept, and the group is
// never recomputed from a later rule (its time is the earliest, should a
// unit's concurrent requests finish out of order). Held-out units (the global holdout)
// are a group of their own, "holdout". A rolled-back (or frozen) rule
// exposes nobody new: its users go to control without being randomized.
// Observe is fed only by the data plane's OnDone, so explain, dry runs and
// mirrored requests never expose anyone.
//
// A conversion counts for a unit exposed at or before it and less than the
// conversion window (default 72h) earlier. It comes from a request that
// meets a metric's match (any request of the unit, claimed by the rule or
// not), from a value the upstream reported in a from_header metric's
// response header (which the data plane strips), or from the events API.
// A binomial metric counts a unit once; a mean metric's unit value is the
// sum of what it reported. Values are kept as integers of µ-units
// (millionths), per unit, so sums and sums of squares of per-unit totals
// are exact and do not depend on the order events arrive in: a unit's
// later value changes its square from v² to (v+x)², and results computed
// by a fleet agree to the last bit with one gateway's. A conversion that
// arrives before its unit's exposure (another gateway has not flushed
// yet; a backend posted the event while the request was still being
// served) waits up to a minute for it. The data-dir store journals it,
// so a restart keeps it, and counts one that waited in vain
// (reason="no_exposure"), also when the wait ended while it was closed.
// In Redis, the batch of the experiment's events that finds a wait ended
// drops it and counts it, on the gateway that sent the batch; the gateway
// that parked it sweeps its experiment once the wait ends if no batch has.
// Either store sweeps waits that ended while no events come at most a
// second late, or one flush interval if that is longer.
//
// # The request path
//
// Observe takes one of 64 shard locks (by a hash of experiment and unit),
// looks the key up in the shard's seen set and, the first time, copies
// the event into the shard's fixed queue; it never allocates and never
// waits on disk or Redis. A full queue drops the event and counts it
// (graygate_experiment_events_dropped_total{reason="queue_full"}); a
// half-full one wakes the writer early. One writer goroutine swaps the
// queues out every flush interval and applies them to the store, which
// deduplicates for good; the seen set is only a cache in front of it.
//
// # Stores
//
// The data-dir store (localStore) keeps every unit in memory, in Go maps:
// 8 bytes of key (xxh64 of the unit; two units collide with probability
// n²/2⁶⁵ per experiment) and 16 of exposure per unit, 35–70 bytes with the
// map's slack (57 measured at 1,000,000 units, TestMemoryPerUnit), plus
// ~60 per unit with a binomial conversion and a mean value. It appends
// what each flush changed to a journal and fsyncs it before the flush's
// results become visible, and writes a snapshot when the journal passes
// 64 MiB. A kill -9 loses at most what was queued since the last flush:
// one flush interval. experiments.max_units bounds the units it holds.
//
// The Redis store (redisStore) is shared by a fleet; see its doc for the
// keys. The writer sends batches through one Lua script that deduplicates
// in Redis (HSETNX), so a unit that hits two gateways counts once, and
// results read Redis's aggregates. While Redis is unreachable routing
// goes on, events wait in a buffer of experiments.buffer_events, and the
// oldest beyond it are dropped and counted (reason="store_unavailable"),
// never part of a batch whose reply was lost (see Recorder.dropOldest).
//
// # Health
//
// After each flush (at most every 250 ms) the writer runs the
// sample-ratio-mismatch check of every experiment (package stats) from the
// store's unit counts and exports graygate_experiment_units,
// graygate_experiment_srm_p_value and its anytime-valid sibling
// graygate_experiment_srm_sequential_p_value. A split that turns
// mismatched (stats.SRM.Alert: both p-values below the threshold, so that
// checking four times a second does not flag clean splits) logs a WARN
// naming the experiment, calls Options.OnSRM, and with
// experiments.srm_action: freeze rolls the judged rule version back
// through Options.Freeze, the one-click rollback, with the reason in its
// history. The check judges the units of the experiment's current phase
// (phase.go): when the allocation changes (weights, the holdout's share)
// or an operator resumes a rule the check froze, only the units assigned
// from then on. The phase, and the freezes the check made in it, are
// stored with the experiment's data, so a restart or another gateway of
// the fleet neither alerts again nor undoes the resume.
//
// # The events API
//
// PostEvents hands its events to the writer and answers once they are in
// the store, but never waits on Redis: with Redis down, or a store call
// in progress for half a second, once they are in the writer's buffer.
// The events waiting for the writer are bounded by
// experiments.buffer_events; beyond it a submission is refused at once
// (BusyError, a 503 with Retry-After), recording nothing.
package experiment
