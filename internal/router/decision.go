package router

import (
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/upstream"
)

// Group names that are not experiment group names.
const (
	GroupGray    = "gray"
	GroupStable  = "stable"
	GroupDefault = "default"
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
	// Identity is who the request is.
	Identity identity.ID
	// UpstreamHost asks the data plane to send the instance address as Host
	// instead of keeping the client's Host.
	UpstreamHost bool
}
