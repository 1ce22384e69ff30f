package rollout

// Notification events the engine emits.
const (
	EventStep      = "rollout_step"
	EventPaused    = "rollout_paused"
	EventAborted   = "rollout_aborted"
	EventCompleted = "rollout_completed"
)

// Notifier delivers the engine's events: event is one of the Event
// constants, rule the rule key, text a sentence for people, unescaped
// (the notify package escapes it for Slack and Mattermost), and fields the structured details: state,
// step, percent, and for an abort the check, its value and threshold.
//
// Notify is called after the change it reports is committed, once per
// change across a fleet (by the gateway whose write won), from the
// engine's goroutines: it must not block (queue and return) and must be
// safe for concurrent use.
type Notifier interface {
	Notify(event, rule, text string, fields map[string]any)
}

type event struct {
	name, text string
	fields     map[string]any
}
