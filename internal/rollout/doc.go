// Package rollout drives gray rules' rollout plans: steps that raise
// gray_percent, pauses, analyses of the gray version's health, and an
// automatic abort, as Argo Rollouts and Flagger do for Kubernetes, but
// inside the gateway, on one box or in a fleet.
//
// The plan is part of the rule (rule.Rollout), and so is where it stands
// (rule.RolloutStatus): every step change, pause, abort, completion,
// promote and retry is a new version of the rule, written through the
// store with compare-and-set on the version the change was decided on,
// by the actor "rollout" (or the operator's token for manual actions),
// with a reason. A restart, a kill -9 or a takeover by another gateway
// resumes from the stored status: a timed pause keeps its deadline
// (pause_until, wall-clock time, so time a gateway was down counts as
// paused), and the analysis under way starts over, since its
// measurements live in memory (the latest are copied into each status the
// engine writes).
//
// # Steps
//
//   - percent sets gray_percent; percents never decrease within a plan,
//     nor fall below the gray_percent the rollout starts from.
//   - pause waits for a duration, or with {} until promote.
//   - analysis takes count measurements interval apart: more than
//     failure_limit failed ones abort the rollout, more than
//     inconclusive_limit inconclusive ones pause it, and count within the
//     limits pass the step.
//   - background_analysis measures every interval for the whole rollout,
//     its limits applied to its last count measurements.
//
// A measurement runs every check of its analysis once: built-in metrics
// over the last interval of this gateway's (or the fleet's) traffic
// (Recorder), a Prometheus instant query, or a webhook. A window with
// fewer than min_requests requests is inconclusive, never a pass, and so
// are counters that cannot be read (a fleet's etcd away); a Prometheus
// query or a webhook that cannot be made (a timeout) is an error and
// counts as a failure. A query's +Inf or -Inf is held to the bounds like
// any value, and kept in the check's message only (JSON has no number for
// it).
//
// # Abort
//
// An abort sets gray_percent to 0 (the whitelist keeps working unless
// abort_whitelist), records the failing check with its value and
// threshold, and notifies. The gray target's breaker counts too: when it
// opens during a rollout, the rollout aborts with the breaker's reason
// (abort_on_breaker, the default) or the measurements under way fail.
//
// # Rollback
//
// One-click rollback (of the rule, or of every rule) holds the rollout
// where it stands, as the rollback keeps the scene: no step, no
// measurement (gray serves nobody, so there is nothing to judge), no
// version, and promote is refused. After the resume it goes on from
// there: a timed pause has what it had left when the rollback came, and
// the analyses under way start over.
//
// # Who drives
//
// On one box the gateway's Engine drives every active rollout. In a fleet
// (Fleet) every gateway campaigns for each rollout in an etcd election and
// only the winner drives; the others follow through the store. Operators'
// actions (Act) are compare-and-set writes that any gateway may make; the
// driver sees the new version and goes on from it.
//
// # Concurrency
//
// Engine is safe for concurrent use. Each active rollout has one driver
// goroutine; it is the only writer of its rule besides operators, and a
// write that loses a compare-and-set is decided again on the newer
// version, never retried blindly. An operator's promote or resume means
// the step its caller saw: if the rollout moved meanwhile it is refused,
// not carried out on the next step (two promotes at once pass one gate),
// and with If-Match (Command.IfVersion) any newer version is a conflict.
// Notifications go out after the write that caused them commits, from
// the gateway whose write won.
package rollout
