// Package mirror sends shadow copies of requests to a mirror target and
// diffs its answers against the primary's.
//
// A gray rule's "mirror" field (package rule) compiles into a Spec. Of the
// requests in the rule's scope that it does not send to gray, and that are
// served by its stable target, the router (router.Decision.Mirror) picks
// those whose method the mirror allows and whose user's mirror bucket,
// xxh64(rule + ":mirror:" + uid) % 10000, is below percent × 100, so a user
// is mirrored consistently and independently of being gray. The client only
// ever gets the primary's answer.
//
// # Fire and forget
//
// Set.Mirror never waits: it puts the copy on the mirror's bounded queue
// (Options.Queue per rule, Options.MaxQueuedBytes for every queue
// together) or drops it, counting the drop. A few workers per rule
// (Options.Workers) send the copies over the Set's own net/http Transport:
// its own connection pool, dial timeout and exchange timeout
// (Options.Timeout), never the data plane's. A slow, stalled or dead mirror
// target therefore costs the primary nothing but a queue that fills:
// copies are dropped (graygate_mirror_dropped_total{rule}) and failed
// exchanges are counted (graygate_mirror_failed_total{rule}), beside the
// answered ones (graygate_mirror_sent_total{rule}). Instances are picked
// from the target pool with its balancer, skipping ejected ones, and let
// go with Pool.Release: shadow traffic never feeds passive health, so a
// failing candidate cannot eject an instance that also serves real users.
//
// The copy is the primary's upstream request: method, request-target,
// headers (hop-by-hop, framing and Expect fields dropped), body and
// trailer fields (with which the body goes chunked, except to an
// instance whose last answer came over HTTP/1.0: it gets the body with
// its length and no trailer section), the Host with
// HostSuffix appended before the port (Envoy's "-shadow" convention), and
// X-Gray-Mirror: 1, so that the mirror target and what it calls can tell
// shadow traffic apart. A request whose body is over the mirror's max_body
// is not mirrored. Redirects are not followed: a 3xx is an answer to
// compare.
//
// # The diff (Twitter's Diffy)
//
// With "diff", each answer of the mirror target (the candidate) is compared
// with the primary's: the status; the response headers except the
// hop-by-hop ones, the fields Connection names and Content-Length (a body
// that differs is reported by path, not also as a length); JSON bodies
// (application/json, +json) field by field, by path, arrays element-wise
// ("body.items[2].price"), numbers as decimals (integers exactly: an id
// beyond 2^53 that the candidate rounds differs); other bodies as a whole (bytes, "body"). A gzip
// Content-Encoding is undone first. Bodies longer than
// Options.MaxResponseBody are not compared. Paths in "ignore" (and
// everything under them; "[*]" matches any index) are skipped.
//
// With "secondary", a second instance of the stable version gets the same
// copy at the same time, and its differences from the primary are the
// noise: a timestamp or a random id differs between any two answers, the
// candidate's as much as the secondary's. Per field, raw_rate is the share
// of compared candidate answers in which it differed, noise_rate the share
// of compared secondary answers. Diffy's filter
// (analysis/JoinedDifferences.scala, DifferencesFilterFactory) reports a
// field when raw > noise, |raw − noise| / (raw + noise) > relative and the
// absolute difference > absolute, with defaults relative 20 (percent) and
// absolute 0.03 (percent of requests). graygate applies the same filter to
// the rates with these thresholds (Thresholds, DefaultThresholds): a field
// is a regression when
//
//	compared ≥ 10 and raw_rate > noise_rate and
//	raw_rate − noise_rate > 0.03 and
//	(raw_rate − noise_rate) / (raw_rate + noise_rate) > 0.20
//
// that is, relative 20% as in Diffy, and absolute 3 percentage points
// rather than Diffy's 0.03%, with a floor of 10 compared answers. Without
// a secondary the noise rate is 0 and every field that differs in more
// than 3% of the answers is reported.
//
// Memory is bounded: per rule at most Options.MaxFields fields are tracked
// (further differences are only counted, as untracked_differences), each
// with at most Options.MaxExamples examples whose values are cut to
// Options.ExampleBytes.
//
// # State across reloads
//
// Like breakers (breaker.Set), mirrors live outside the snapshots: the
// reloader calls Set.Sync with every Spec of the snapshot it is about to
// publish. A mirror is keyed by its rule, its targets and its ignore list
// (Spec.Key): changing any of them starts its diff over; changing percent,
// methods, max_body or host_suffix keeps it. The counters are per rule.
//
// # The data plane's contract
//
// Mirrored requests never count toward experiments, breakers, rollout
// windows or request metrics of the primary: they never pass through the
// data plane's OnDone, access log, Decision.Guard or Pool.Report. The data
// plane's part, for a decision d with d.Mirror != nil (sp := d.Mirror):
//
//  1. Request phase, before the request goes upstream: buffer the request
//     body up to sp.MaxBody (a mirrored request is by default GET or HEAD,
//     so this is usually nothing). If it is longer, set BodyTruncated and
//     stream it as usual; the copy will be dropped.
//  2. Upstream request filter: keep a copy (its own memory, not fasthttp's)
//     of what goes upstream: method, request-target, Host and header
//     fields after the gateway's own changes (X-Gray-Tag, X-Request-Id,
//     X-Forwarded-*), and the trailer fields sent after the body.
//  3. Response phase: tee the upstream's response body into a buffer of at
//     most Set.MaxResponseBody() bytes (setting BodyTruncated beyond it),
//     and copy its status and header fields before the gateway adds
//     X-Gray-Rule, X-Gray-Group, X-Gray-Degraded and Via.
//  4. Logging phase, once the client's answer is complete (after OnDone):
//     call set.Mirror(sp, req, resp) and move on; it returns at once. Skip
//     it when the primary exchange failed before an answer (499, 502, 503,
//     504 from the gateway itself): there is nothing to compare, and the
//     request has already cost enough.
//
// A request degraded by a fallback after the decision (Decision.FallBack)
// was still served by stable and may be mirrored; a WebSocket upgrade is
// never mirrored.
package mirror
