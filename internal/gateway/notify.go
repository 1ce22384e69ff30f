package gateway

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/experiment"
	"github.com/graygate/graygate/internal/notify"
)

// notifyDrain bounds how long a stopping gateway keeps delivering queued
// notifications, within lifecycle.shutdown_timeout.
const notifyDrain = 5 * time.Second

// Notify sends ev to the configured webhooks that subscribe to its type.
// It never blocks (see notify.Sender.Send), so any part of the gateway may
// call it, the data plane included: the rollout engine for rollout_*
// events, the experiments' SRM detector for srm.
func (g *Gateway) Notify(ev notify.Event) {
	if g.notify != nil {
		g.notify.Send(ev)
	}
}

// gatewayName is the config's name, or the hostname.
func gatewayName(cfg *config.Config) string {
	if cfg.Name != "" {
		return cfg.Name
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "graygate"
}

// receivers turns the config's notifications into receivers, reading each
// secret from its environment variable.
func receivers(cfg *config.Config) ([]notify.Receiver, error) {
	out := make([]notify.Receiver, 0, len(cfg.Notifications))
	for i, n := range cfg.Notifications {
		r := notify.Receiver{Name: n.Name, URL: n.URL, Events: n.Events}
		if n.SecretEnv != "" {
			v := os.Getenv(n.SecretEnv)
			if v == "" {
				return nil, fmt.Errorf("notifications[%d].secret_env: environment variable %s is empty or unset", i, n.SecretEnv)
			}
			r.Secret = []byte(v)
		}
		out = append(out, r)
	}
	if err := notify.Check(out); err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	return out, nil
}

// newSender builds the gateway's one Sender. It lives as long as the
// gateway: reloads reconfigure it in place (reconfigureNotify).
func (g *Gateway) newSender(cfg *config.Config) (*notify.Sender, error) {
	rs, err := receivers(cfg)
	if err != nil {
		return nil, err
	}
	return notify.New(notify.Options{
		Gateway:   gatewayName(cfg),
		Receivers: rs,
		Delivery:  g.opts.Notify,
		Counters:  g.metrics.Notifications(),
		Logger:    g.opts.Logger,
		Now:       g.opts.Now,
		Random:    g.opts.Random,
	})
}

// reconfigureNotify applies a reloaded config's notifications to the
// running Sender, in place: a receiver that keeps its name keeps its queue
// (nothing queued is lost and its order holds, and its queued events go to
// its new URL), a removed one's queued events are dropped and counted, a
// new one starts empty. rs was built from cfg before the reload committed.
func (g *Gateway) reconfigureNotify(cfg *config.Config, rs []notify.Receiver) {
	if err := g.notify.Reconfigure(gatewayName(cfg), rs); err != nil {
		g.log.Error("apply the notifications of the reloaded config", "err", err)
	}
}

// notifyBreaker tells the webhooks that a gray target's breaker opened or
// closed. Half-open is no event: it ends in one of the two.
func (g *Gateway) notifyBreaker(rule, target string, from, to breaker.State, reason string) {
	ev := notify.Event{Rule: rule, Fields: map[string]any{"target": target, "from": from.String(), "to": to.String(), "reason": reason}}
	switch {
	case to == breaker.Open:
		ev.Type = notify.BreakerOpen
		ev.Text = fmt.Sprintf("breaker opened for rule %s (gray target %s): %s; its gray users go to stable", rule, target, reason)
	case to == breaker.Closed && from != breaker.Closed:
		ev.Type = notify.BreakerClose
		ev.Text = fmt.Sprintf("breaker closed for rule %s (gray target %s): %s; gray traffic resumes", rule, target, reason)
	default:
		return
	}
	g.Notify(ev)
}

// onSRM tells the receivers of srm events that an experiment's split is
// mismatched, then calls Options.OnSRM. It runs on the experiment
// recorder's writer; Send only queues.
func (g *Gateway) onSRM(a experiment.SRMAlert) {
	groups := make([]string, 0, len(a.Units))
	for name := range a.Units {
		groups = append(groups, name)
	}
	slices.Sort(groups)
	var units strings.Builder
	for i, name := range groups {
		if i > 0 {
			units.WriteString(", ")
		}
		fmt.Fprintf(&units, "%s %d", name, a.Units[name])
	}
	then := "its results cannot be trusted until the cause is fixed"
	if a.Frozen {
		then = "the rule is rolled back (experiments.srm_action: freeze)"
	}
	g.Notify(notify.Event{Type: notify.SRM, Rule: a.Rule,
		Text: fmt.Sprintf("sample ratio mismatch in experiment %s (rule %s): p = %.3g < %g (sequential p = %.3g) with units %s; %s",
			a.Experiment, a.Rule, a.PValue, a.Threshold, a.SequentialPValue, units.String(), then),
		Fields: map[string]any{"experiment": a.Experiment, "p_value": a.PValue, "sequential_p_value": a.SequentialPValue, "threshold": a.Threshold, "units": a.Units, "frozen": a.Frozen}})
	if g.opts.OnSRM != nil {
		g.opts.OnSRM(a)
	}
}

// closeNotify delivers what is queued for up to notifyDrain within ctx.
func (g *Gateway) closeNotify(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, notifyDrain)
	defer cancel()
	if err := g.notify.Close(ctx); err != nil {
		g.log.Warn("notifications still queued at shutdown were dropped", "err", err)
	}
}

// canceled is a done context: Close drops what is queued at once.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
