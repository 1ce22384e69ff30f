package router

import (
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/limit"
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
	Stable *upstream.Pool
	// Degraded is "", "rollback", "breaker" or "fallback".
	Degraded string
	// Intended is the target the rule chose before a degradation sent the
	// request elsewhere (nil when not degraded), for the degradation record.
	Intended *upstream.Pool
	// Identity is who the request is.
	Identity identity.ID
	// UpstreamHost asks the data plane to send the instance address as Host
	// instead of keeping the client's Host.
	UpstreamHost bool
	// Breaker guards the gray target this request goes to (nil otherwise).
	// The data plane must report the outcome exactly once:
	// Breaker.Record(Ticket, breaker.Outcome{...}).
	Breaker *breaker.Breaker
	Ticket  breaker.Ticket
	// Policy holds the route's limits; it is never nil.
	Policy *Policy
	// VersionHeader names the request header whose value picks instances
	// by their "version" metadata (seed 003), for routes that enable it;
	// "" leaves it to the pool's own setting.
	VersionHeader string
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
