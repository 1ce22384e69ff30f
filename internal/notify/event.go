package notify

import (
	"slices"
	"time"
)

// Event types. They are a contract with receivers (the "event" field of
// the body, the X-Graygate-Event header) and with the config (a
// receiver's "events" list), so they never change spelling.
const (
	// BreakerOpen: a gray target's circuit breaker opened (or reopened
	// after a failed probe); its gray users go to stable.
	BreakerOpen = "breaker_open"
	// BreakerClose: the breaker closed again; gray traffic resumes.
	BreakerClose = "breaker_close"
	// Rollback: one-click rollback was turned on, globally or for a rule.
	Rollback = "rollback"
	// Resume: one-click rollback was turned off, globally or for a rule.
	Resume = "resume"
	// RolloutStep: a rollout moved to its next step.
	RolloutStep = "rollout_step"
	// RolloutPaused: a rollout paused (a pause step without a duration,
	// an inconclusive analysis, or an operator).
	RolloutPaused = "rollout_paused"
	// RolloutAborted: a rollout aborted (failed analysis, open breaker,
	// or an operator).
	RolloutAborted = "rollout_aborted"
	// RolloutCompleted: a rollout reached its last step.
	RolloutCompleted = "rollout_completed"
	// SRM: an experiment's sample ratio mismatch was detected.
	SRM = "srm"
)

// types is every event type, in the order the README lists them.
var types = [...]string{BreakerOpen, BreakerClose, Rollback, Resume, RolloutStep, RolloutPaused, RolloutAborted, RolloutCompleted, SRM}

// Types returns every event type, in documentation order. The caller may
// modify the returned slice.
func Types() []string { return slices.Clone(types[:]) }

// Known reports whether t is an event type.
func Known(t string) bool { return slices.Contains(types[:], t) }

// Event is one thing that happened, to be told to the receivers that
// subscribe to its Type.
//
// Send serializes the event before it returns, so the caller may reuse
// Fields afterwards.
type Event struct {
	// Type is one of the event type constants; Send refuses others.
	Type string
	// Rule is the key of the rule the event is about, or "" for an event
	// about every rule (a global rollback).
	Rule string
	// Time is when it happened; zero means when Send was called.
	Time time.Time
	// Text is the human sentence, without the gateway's name (Send puts
	// "[gateway] " in front of it, escapes &, < and > as Slack asks, and puts a
	// WORD JOINER after every @ so that Mattermost mentions no one).
	// Chat webhooks (Slack, Mattermost) show the body's "text" field.
	// Empty means a generic sentence made from Type and Rule.
	Text string
	// Fields are the event's structured details (a breaker's reason, a
	// rollout's step, percent, check, value and threshold, an actor), put
	// at the top level of the JSON body. A field named like one of the
	// body's own fields (id, event, rule, time, gateway, text) is dropped:
	// those always mean what the README says.
	Fields map[string]any
}

// reserved are the body's own fields, which Fields cannot override.
var reserved = [...]string{"id", "event", "rule", "time", "gateway", "text"}
