// Package upstream holds named pools of upstream instances, picks one
// instance per request, and keeps the health of every instance.
//
// # Pools are values, health is state
//
// A Pool is rebuilt on every config reload and whenever discovery reports a
// new instance list, and it must not be modified after it has been
// published. Everything that has to outlive a rebuild — in-flight counts,
// consecutive failures, ejections and their backoff, active probe results —
// lives in a shared *Health, keyed by instance address, in atomics. This is
// Caddy's arrangement (reverseproxy keeps per-host failure counts in a
// package-level pool outside the config); here the registry is an explicit
// value passed in, never a global.
//
// Addresses are reference counted: NewPoolWith takes a reference on every
// address of the pool and Pool.Close gives them back. An active probe loop
// runs while at least one pool with active health holds the address, and the
// state of an address is forgotten once no pool holds it. A rebuild therefore
// builds the new pool first and closes the old one after the swap
// (Registry.Retire does that for a whole registry); addresses present in
// both keep their state and their probe loop without a gap.
//
// # Balancing
//
// Three balancers are offered: "round_robin" (default), "weighted" (nginx's
// smooth weighted round robin, so a 5:1:1 pool goes a a b a c a a rather
// than a a a a a b c) and "least_request" (power of two random choices over
// in-flight counts, after Mitzenmacher; it ignores weights). All of them
// skip instances that are ejected or failing their probes, and none of them
// allocates.
//
// # The data plane's contract
//
// Every successful Pick or PickVersion must be paired with exactly one
// Report on the same pool, which ends the request's in-flight count and
// feeds passive health:
//
//	inst, err := pool.PickVersion(headerValue) // or pool.Pick()
//	if err != nil { /* errors.Is(err, ErrNoInstance): 503 */ }
//	… forward to inst …
//	pool.Report(inst, ok) // ok=false: connection error, timeout or 5xx
//
// A request the client abandoned is reported ok=true: it says nothing
// about the instance, but it still ends the in-flight count.
//
// # Departures from the anchors
//
// Active health starts an instance healthy, as Caddy does and Envoy does
// not: a reload must never take traffic away from instances that nobody has
// had the time to probe; passive health catches a dead newcomer within
// ConsecutiveFailures requests. Passive ejection backs off exponentially
// (Envoy's outlier detection) where Caddy forgets failures after a fixed
// duration, so a flapping instance is kept out longer each time.
//
// # Version routing (seed 003)
//
// PickVersion implements the Ribbon predicate of seed 003
// ("Zuul 网关层的灰度发布"): with a non-empty version it chooses among the
// instances whose metadata "version" equals it, and when the version is
// empty or no instance matches it falls back to all instances, exactly as
// the seed's getEligibleServers returns servers when results is empty.
// One thing is decided before the predicate runs: the seed filters
// lb.getAllServers() and leaves liveness to Ribbon's pings, whereas here
// ejected and failing instances are removed first. A version whose only
// instances are down therefore falls back like a version nobody has, and
// the request is served by the rest of the pool instead of failing.
//
// Explicit subsets ("user-center@version=2", resolved by Registry.Resolve)
// are different: they are a target chosen by a rule, so they never fall
// back to the rest of the pool. A subset without a healthy instance fails
// with ErrNoInstance naming the subset, and the data plane answers 503.
package upstream
