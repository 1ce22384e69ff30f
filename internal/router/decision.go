package router

import (
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/rule"
	"github.com/graygate/graygate/internal/upstream"
)

// Group names that are not experiment group names.
const (
	GroupGray    = "gray"
	GroupStable  = "stable"
	GroupDefault = "default"
	// GroupHoldout answers a request whose user the holdout keeps out of
	// every experiment: the ab rule's control target serves it.
	GroupHoldout = rule.GroupHoldout
)

// Degrade reasons, sent as X-Gray-Degraded.
const (
	DegradedRollback = "rollback"
	DegradedBreaker  = "breaker"
	DegradedFallback = "fallback"
)

// Decision is where one request goes and why. It is a value: the data plane
// may keep it for the lifetime of the request, and everything it points to
// belongs to an immutable snapshot.
type Decision struct {
	// Route is the name of the route that matched ("" for the global default).
	Route string
	// Rule is the key of the rule that claimed the request ("" if none did).
	Rule string
	// Group is "gray", "stable", an experiment group name, or "default".
	Group string
	// Tag is the X-Gray-Tag coloring value for the upstream request; "" sends none.
	Tag string
	// Target is the pool that serves the request.
	Target *upstream.Pool
	// Stable is the claiming rule's stable target, for fallback; nil if none.
	// For an ab rule it is the control group's pool.
	Stable *upstream.Pool
	// StableTag is Stable's X-Gray-Tag, which a request degraded to Stable
	// (Guard, FallBack) carries on, so that the call chain behind stable is
	// colored as what served it.
	StableTag string
	// Experiment is the experiment_id of the ab rule that claimed the
	// request ("" for other rules). A request of an experiment that is
	// degraded to the control group's pool keeps its Group: it was assigned
	// to that group, and relabelling it would count it in a group it is
	// not in (or in "stable", which is outside the experiment).
	Experiment string
	// Degraded is "", "rollback", "breaker" or "fallback".
	Degraded string
	// Intended is the target the rule chose before a degradation sent the
	// request elsewhere (nil when not degraded), for the degradation record.
	Intended *upstream.Pool
	// Identity is who the request is.
	Identity identity.ID
	// Reject, when not empty, refuses the request before any rule ran: the
	// data plane answers 400 with this message and sends the request
	// nowhere (not to a rate limiter, not upstream). Target is then nil.
	// Today the only cause is an identity over identity.max_length
	// (Identity.Refused says so).
	Reject string
	// UpstreamHost asks the data plane to send the instance address as Host
	// instead of keeping the client's Host.
	UpstreamHost bool
	// Breaker guards the gray target this request goes to (nil otherwise).
	// The router does not ask it: the data plane calls Guard once, after
	// its own rate limits and concurrency caps, so that a request they
	// refuse never spends a half-open probe. If Guard lets the request
	// through, Ticket is set and the data plane must report the outcome
	// exactly once: Breaker.Record(Ticket, breaker.Outcome{...}).
	Breaker *breaker.Breaker
	Ticket  breaker.Ticket
	// Policy holds the route's limits; it is never nil.
	Policy *Policy
	// Report is what the claiming rule asks the data plane to collect
	// (nil: nothing). It belongs to the snapshot and must not be modified.
	Report *Report
	// Strip names the response headers that any rule of the snapshot
	// reads metric values from (from_header). The data plane removes them
	// from every response, whichever rule claimed the request or none did:
	// what an upstream reports for an experiment (a revenue figure) is
	// never the client's to see. It belongs to the snapshot and must not
	// be modified; nil when no rule reads any. (A pointer keeps Decision
	// comparable.)
	Strip *Strip
	// Mirror, when set, asks the data plane to send a shadow copy of the
	// request, with the primary's answer, to mirror.Set.Mirror once the
	// primary has answered (see package mirror). The router sets it only
	// for a request that a gray rule with a mirror had in scope and did
	// not send to gray, that is served by that rule's stable target, whose
	// method the mirror allows and whose user's mirror bucket it selects.
	// It belongs to the snapshot and must not be modified.
	Mirror *mirror.Spec
	// VersionHeader names the request header whose value picks instances
	// by their "version" metadata (seed 003), for routes that enable it;
	// "" leaves it to the pool's own setting.
	VersionHeader string
}

// Guard asks the breaker that guards Target whether this request may go
// there (seed 004 §3.3.1). If it may, Ticket is set and Guard returns
// false. If not, the request goes to Stable instead, as the router's
// degradation of a rule does: Group stable, Tag StableTag, Degraded
// "breaker", Intended the gray target, Breaker nil; Guard returns true
// (the target changed). A decision without a Breaker is left alone.
//
// The data plane calls Guard once per request, after admitting it (rate
// limit, body size) and after taking the target pool's concurrency slot,
// so that only a request that will really be sent can spend one of a
// half-open breaker's few probes. Explain never calls it: it only reads
// the breaker's state.
func (d *Decision) Guard() bool {
	b := d.Breaker
	if b == nil {
		return false
	}
	if t, ok := b.Allow(); ok {
		d.Ticket = t
		return false
	}
	d.Intended = d.Target
	d.Group, d.Target, d.Tag, d.Degraded = GroupStable, d.Stable, d.StableTag, DegradedBreaker
	d.Breaker, d.Ticket = nil, breaker.Ticket{}
	return true
}

// FallBack turns d into the replay of its request on Stable after Target
// failed before answering (seed 004 §3.3.2, result degradation): Degraded
// "fallback", Intended the failed target, Tag StableTag, and no breaker
// (the failed target's breaker has its outcome already). A gray rule's
// request becomes group stable, which is what served it; an experiment's
// request keeps the group it was assigned (see Experiment), so the
// experiment counts it as a degraded request of that group and never as
// one of the control group.
func (d *Decision) FallBack() {
	d.Intended, d.Target = d.Target, d.Stable
	if d.Experiment == "" {
		d.Group = GroupStable
	}
	d.Degraded, d.Tag = DegradedFallback, d.StableTag
	d.Breaker, d.Ticket = nil, breaker.Ticket{}
}

// DefaultFallbackBodyBytes is how much of a request body is buffered so
// that the request can be replayed on the stable target.
const DefaultFallbackBodyBytes = 64 << 10

// Policy is a route's limits. It belongs to a snapshot and must not be
// modified after publication; the Limiter inside keeps its state across
// reloads (see package limit).
type Policy struct {
	// UpstreamTimeout bounds the wait for the upstream's response header
	// (0: the data plane's default).
	UpstreamTimeout time.Duration
	// MaxBodyBytes answers 413 to larger request bodies (0: no limit).
	MaxBodyBytes int64
	// Limiter rate-limits the route (nil: no limit); 429 with Retry-After.
	Limiter *limit.Limiter
	// FallbackBodyBytes is the largest request body buffered for a replay
	// on the stable target when a gray target fails before answering.
	FallbackBodyBytes int64
}

// NoPolicy is the Policy of a route without limits.
var NoPolicy = &Policy{FallbackBodyBytes: DefaultFallbackBodyBytes}

// Strip names response headers the data plane removes (Decision.Strip).
type Strip struct {
	Headers []string
}

// Report is what a rule asks the data plane to collect from a request it
// claimed, for its experiment's metrics.
type Report struct {
	// Headers name the response headers in which the upstream reports
	// metric values (from_header metrics). The data plane hands their
	// values to OnDone and removes them before the client sees the
	// response.
	Headers []string
}
