// Package notify delivers event notifications to webhooks: signed,
// retried, bounded.
//
// The gateway tells a Sender what happened (a breaker opened, an operator
// rolled back, a rollout moved on) with Send, which serializes the event
// and puts it on the queue of every receiver that subscribes to its type,
// then returns. Send never waits for the network, so the data plane can
// call it from a request's goroutine: it costs 10–25 µs and 49
// allocations for a breaker event that a receiver subscribes to (the
// serialization), and 40–60 ns and none when none does
// (BenchmarkSend, on this project's 2-core machine).
//
// # Delivery
//
// Each receiver has a bounded queue (Delivery.QueueSize) and one
// goroutine that POSTs its events one at a time, in the order they were
// sent. An event is tried up to Delivery.MaxAttempts times, each attempt
// bounded by Delivery.Timeout, with exponential backoff and jitter between
// attempts (Backoff); a 429 or 503 answer's Retry-After is honoured up to
// Backoff.Max. A 2xx answer delivers the event. 5xx, 408, 425, 429,
// transport errors and timeouts are retried; any other answer (a 3xx,
// since redirects are not followed, or a 4xx) refuses the event for good.
// Delivery is at least once: an attempt that timed out after the receiver
// acted on it is sent again, with the same id. Ordering holds per
// receiver: the next event waits until the current one is delivered or
// given up on, so a receiver that is down holds up only its own queue, and
// once that is full Send drops its events (counted, and logged once per
// spell of dropping). Other receivers are unaffected.
//
// # Why not a retry library
//
// github.com/cenkalti/backoff (v4 and v5) and hashicorp/go-retryablehttp
// were considered. The backoff formula is three lines; what matters here
// is the loop around it: per-receiver ordering, cancellation on removal
// and on Close's deadline, counting each outcome, and injected time and
// randomness so the schedule is tested without sleeping. backoff/v5 draws
// its jitter from math/rand's global source and has no clock to inject;
// go-retryablehttp's errors and debug log carry the request URL (it
// redacts only a password), which for a chat webhook is its credential.
// This package strips URLs from every error it logs.
//
// # Body and signature
//
// The body is one JSON object: "text" (a sentence for Slack and
// Mattermost incoming webhooks, with &, < and > escaped as Slack asks, and
// a WORD JOINER after every @, so that quoted text cannot ping a channel,
// mention anyone or make a link), "event", "rule", "time" (RFC 3339,
// UTC), "gateway", "id" (unique per event and Sender, the same on every
// attempt), and the event's own fields beside them. With a secret, the
// X-Graygate-Signature header is "sha256=" followed by the hex HMAC-SHA256
// (RFC 2104) of the exact body bytes, as GitHub's X-Hub-Signature-256 and
// Flagger's webhooks do; Verify checks one.
//
// # Reload and shutdown
//
// Reconfigure changes the receivers in place: a receiver that keeps its
// name keeps its queue, so nothing queued is lost and order holds across a
// reload. Close delivers what is queued until its context ends, then
// cancels, counts the rest as dropped, and waits for its goroutines.
package notify
