package admin

import (
	"context"
	"fmt"

	"github.com/graygate/graygate/internal/notify"
)

// rollbackFlag reads the global (key "") or a rule's rollback flag before
// a change; known is false when it could not be read.
func (s *Server) rollbackFlag(ctx context.Context, key string) (on, known bool) {
	if key == "" {
		st, err := s.opts.Store.Load(ctx)
		return st.RolledBack, err == nil
	}
	e, err := s.opts.Store.Get(ctx, key)
	return e.RolledBack, err == nil
}

// notifyRollback tells the webhooks about a committed rollback or resume,
// with who did it and why. Only the gateway that took the request sends
// it, so a fleet sends one.
func (s *Server) notifyRollback(key string, on bool, by, reason string, revision int64) {
	if s.opts.Notify == nil {
		return
	}
	ev := notify.Event{Type: notify.Resume, Rule: key,
		Fields: map[string]any{"actor": by, "reason": reason, "scope": "rule", "revision": revision}}
	switch {
	case on && key == "":
		ev.Type, ev.Text = notify.Rollback, by+" rolled back every rule: gray traffic goes to stable, experiments to their control group"
	case on:
		ev.Type, ev.Text = notify.Rollback, fmt.Sprintf("%s rolled back rule %s: its users go to its stable target or its control group", by, key)
	case key == "":
		ev.Text = by + " resumed every rule: rules route as written again"
	default:
		ev.Text = fmt.Sprintf("%s resumed rule %s: it routes as written again", by, key)
	}
	if key == "" {
		ev.Fields["scope"] = "global"
	}
	if reason != "" {
		ev.Text += " (reason: " + reason + ")"
	}
	s.opts.Notify(ev)
}
