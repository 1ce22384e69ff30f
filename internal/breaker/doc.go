// Package breaker implements the per-target circuit breaker of seed 004
// §3.3.1: when a gray target's error rate exceeds 20% or its p99 latency
// exceeds 500ms over 30 seconds, the breaker opens and the router sends
// that target's gray traffic to stable; after 60 seconds it lets a few
// probes through and closes if they all succeed. Every threshold can be set
// per rule (Config).
//
// # Use
//
// The router asks Allow before sending a request to a gray target and sends
// it to stable if the answer is no. The proxy reports every allowed request
// with Record, classifying it itself: connection failures, timeouts and
// responses whose status IsErrorStatus (default 500-599) are failures.
// Breakers live in a Set keyed by rule and target, outside the rule
// snapshots, so a reload keeps their state, as Caddy keeps per-host failure
// counts outside its config. Snapshot and OnTransition make the state and
// the reason for every transition visible to logs, metrics, the status API
// and explain.
//
// # Why not github.com/sony/gobreaker/v2
//
// gobreaker v2.4.0 was the obvious candidate, and two of its ideas are kept
// here: a generation that grows on every transition so that a result from
// an earlier state is ignored (our Ticket), and closing only after every
// half-open probe succeeded. It does not fit the rest:
//
//   - Its trip hook, ReadyToTrip(Counts), sees request, success and failure
//     counts and is called only when a request fails. A p99 condition needs
//     latencies and must be able to trip on a slow success. Counting slow
//     requests as failures would conflate the two conditions (20% slow is
//     not "p99 above 500ms") and no reason could say which one fired.
//   - OnStateChange(name, from, to) carries no reason, and it runs under
//     the breaker's mutex, so it cannot look at the breaker.
//   - It reads time.Now itself; the state machine could only be tested by
//     sleeping.
//   - Settings are fixed at construction, so a changed threshold means a
//     new breaker and the state is lost on every rule reload.
//   - Every request takes its one mutex twice and reads the clock twice,
//     and TwoStepCircuitBreaker.Allow returns a closure. On our 2-core VM
//     its Allow plus done costs about 170 ns of CPU and one 48-byte
//     allocation per request, serial or parallel, against a budget of
//     100 ns and none; Allow plus Record here costs about 22 ns and none.
//
// A wrapper would have had to keep our own window and percentile next to
// it anyway, so the window is written once, here.
//
// # The window
//
// A window is a ring of 30 slots of Window/30 each (1s by default). A slot
// holds a packed request and failure counter, a counter of requests slower
// than p99_latency and a log-linear latency histogram (see histogram.go),
// all atomics, so Record is two or three atomic adds and no allocation,
// and a breaker takes about 20 KB whatever its window.
// The breaker's mutex is taken only to start a new slot, once per slot
// width, and for transitions. Starting a slot also sums the older slots
// still in the window, so that the hot path checks the conditions against
// those totals with one load each.
//
// Both conditions are decided exactly, not from the histogram: the p99 is
// above the threshold exactly when more than floor(n/100) of the n requests
// in the window were slower than it (nearest rank). The histogram (bins at
// most 12.5% wide, 65µs to 69s) only supplies the p99 that reasons and
// snapshots show, and the bin holding the threshold is split by the exact
// count, so a shown p99 is above the threshold exactly when the condition
// holds. A consequence of the definition: with fewer than 100 requests in
// the window the p99 is the slowest request, so the latency condition is
// judged only once the window holds latency_min_requests requests (default
// 100); below that only the error rate can trip the breaker, and one slow
// request at low traffic does not open it.
//
// The conditions are checked on the records that can make them true (a
// failure, a slow request, the ones that reach min_requests and
// latency_min_requests) and when a
// new slot starts, because ageing out fast successes can raise both the
// error rate and the p99. A trip re-evaluates under the lock and merges the
// histograms for the reason only then.
//
// # Time
//
// The clock is injected (Options.Now), and Record takes the request's end
// time from the caller, who already read the clock to measure the latency:
// time.Now costs about 40 ns on our 2-core VM, more than the rest of the
// hot path (compare BenchmarkAllowRecordClosedClock). Allow reads the clock
// only when the breaker is not closed. Times are measured from the
// breaker's creation, so with the monotonic reading time.Now carries, a
// wall clock step does not move the window.
//
// # States
//
// Closed: every request is allowed and recorded. Open: every request is
// refused until open_for has passed. Half-open: half_open_probes requests
// are admitted; if all of them succeed (not failed and not slower than
// p99_latency) the breaker closes with an empty window, and the first
// failure reopens it for a fresh open_for. Requests beyond the admitted
// probes are refused, even after some probes have reported. If every probe
// has been admitted and the breaker is still half-open max(open_for,
// window) after the last admission, the missing results are taken to be
// lost (a caller that never called Record) and the breaker reopens rather
// than staying half-open forever.
package breaker
