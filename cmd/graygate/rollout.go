package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/rollout"
	"github.com/graygate/graygate/internal/rule"
)

const rolloutUsage = `usage: graygate rollout COMMAND KEY [flags]
  get KEY [--watch] [--interval 1s]   the rollout's steps as a timeline (done, current, pending) with its measurements;
                                      --watch redraws in place until it completes (exit 0) or aborts (exit 1)
  promote KEY [--full]                skip the current step (a pause, a pause until promoted, an analysis); --full completes it
  pause KEY                           hold a progressing rollout (a timed pause keeps the time it has left)
  resume KEY                          go on after pause, or after inconclusive measurements (the analysis runs again)
  abort KEY                           gray_percent to 0 and stop
  retry KEY                           restart an aborted rollout from step 0
flags for every command: --admin ADDR --token TOKEN -o text|json
--reason TEXT, recorded in the rule's history: every command but get (the ones that change the rule)`

// errAborted is get --watch's answer when the rollout it watched aborted.
var errAborted = errors.New("the rollout aborted")

func cmdRollout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{rolloutUsage}
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, rolloutUsage)
		return nil
	}
	sub := args[0]
	kind := changing
	switch sub {
	case "get":
		kind = readOnly
	case "promote", "pause", "resume", "abort", "retry":
	default:
		return usageError{rolloutUsage}
	}
	var watch, full bool
	var interval time.Duration
	c, fs, err := newClient("rollout "+sub, kind, args[1:], stdout, stderr, func(fs *flag.FlagSet) {
		switch sub {
		case "get":
			fs.BoolVar(&watch, "watch", false, "redraw in place until the rollout completes or aborts")
			fs.DurationVar(&interval, "interval", time.Second, "how often --watch refreshes")
		case "promote":
			fs.BoolVar(&full, "full", false, "complete the rollout at once, at the plan's last percent")
		}
	})
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{fmt.Sprintf("rollout %s takes one KEY\n%s", sub, rolloutUsage)}
	}
	key := fs.Arg(0)
	switch sub {
	case "get":
		if interval <= 0 {
			return usageError{"--interval must be positive"}
		}
		if watch {
			return watchRollout(ctx, c, key, interval)
		}
		plan, v, raw, err := fetchRollout(ctx, c, key)
		if err != nil {
			return err
		}
		if c.output == "json" {
			c.printJSON(raw)
			return nil
		}
		renderRollout(stdout, key, plan, v, time.Now())
		return nil
	case "promote", "pause", "resume", "abort", "retry":
		body := []byte("{}")
		if full {
			body = []byte(`{"full":true}`)
		}
		raw, err := c.do(ctx, "POST", rulePath(key)+"/rollout/"+sub, body, nil)
		if err != nil {
			return err
		}
		if c.output == "json" {
			c.printJSON(raw)
			return nil
		}
		var v rollout.View
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode the answer: %w", err)
		}
		past := map[string]string{"promote": "promoted", "pause": "paused", "resume": "resumed", "abort": "aborted", "retry": "retried"}[sub]
		fmt.Fprintf(stdout, "rollout %s %s: %s at step %d, gray %s\n  %s\n", key, past, v.State, v.Step, pctText(v.Percent), v.Message)
		return nil
	}
	return usageError{rolloutUsage}
}

// fetchRollout reads the rule's plan and the rollout's state.
func fetchRollout(ctx context.Context, c *client, key string) (*rule.Rollout, rollout.View, json.RawMessage, error) {
	rawRule, err := c.do(ctx, "GET", rulePath(key), nil, nil)
	if err != nil {
		return nil, rollout.View{}, nil, err
	}
	var doc struct {
		Rollout *rule.Rollout `json:"rollout"`
	}
	if err := json.Unmarshal(rawRule, &doc); err != nil {
		return nil, rollout.View{}, nil, fmt.Errorf("decode rule %s: %w", key, err)
	}
	raw, err := c.do(ctx, "GET", rulePath(key)+"/rollout", nil, nil)
	if err != nil {
		return nil, rollout.View{}, nil, err
	}
	var v rollout.View
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, rollout.View{}, nil, fmt.Errorf("decode the rollout of %s: %w", key, err)
	}
	if doc.Rollout == nil {
		return nil, rollout.View{}, nil, fmt.Errorf("rule %s has no rollout", key)
	}
	return doc.Rollout, v, raw, nil
}

// Terminal control for --watch: cursor home, then clear to the end of
// the screen, so each frame overwrites the last (as kubectl argo rollouts
// get rollout --watch does).
const (
	ansiHome  = "\x1b[H"
	ansiClear = "\x1b[J"
	ansiReset = "\x1b[2J"
)

func watchRollout(ctx context.Context, c *client, key string, interval time.Duration) error {
	first, last := true, ""
	for {
		plan, v, raw, err := fetchRollout(ctx, c, key)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if c.output == "json" {
			if s := string(bytes.TrimSpace(raw)); s != last {
				var compact bytes.Buffer
				_ = json.Compact(&compact, raw)
				fmt.Fprintln(c.stdout, compact.String())
				last = s
			}
		} else {
			// The frame's own terminal control goes to the terminal as it
			// is; what it shows of the rollout is escaped (safeWriter).
			var shown, frame bytes.Buffer
			renderRollout(&shown, key, plan, v, time.Now())
			if first {
				frame.WriteString(ansiReset)
			}
			frame.WriteString(ansiHome)
			_, _ = safeWriter{&frame}.Write(shown.Bytes())
			frame.WriteString(ansiClear)
			_, _ = terminal(c.stdout).Write(frame.Bytes())
			first = false
		}
		switch v.State {
		case rule.RolloutCompleted:
			return nil
		case rule.RolloutAborted:
			return fmt.Errorf("rollout %s: %w: %s", key, errAborted, v.Message)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

var stateMarks = map[string]string{
	rule.RolloutProgressing: "◌ progressing",
	rule.RolloutPaused:      "॥ paused",
	rule.RolloutAborted:     "✖ aborted",
	rule.RolloutCompleted:   "✔ completed",
}

func pctText(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) + "%" }

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return t.UTC().Format(time.RFC3339) + " (" + d.String() + " ago)"
}

// renderRollout writes the rollout as a timeline: a header, every step
// marked done (✔), current (►, or ✖ where it aborted, ॥ where it waits)
// or pending (○), the measurements of each step under it, and the
// background analysis's last.
func renderRollout(w io.Writer, key string, plan *rule.Rollout, v rollout.View, now time.Time) {
	n := len(plan.Steps)
	mark := stateMarks[v.State]
	if mark == "" {
		mark = v.State
	}
	fmt.Fprintf(w, "Rollout:       %s\n", key)
	fmt.Fprintf(w, "Status:        %s\n", mark)
	fmt.Fprintf(w, "Message:       %s\n", v.Message)
	fmt.Fprintf(w, "Step:          %d/%d\n", v.Step, n)
	fmt.Fprintf(w, "Gray:          %s\n", pctText(v.Percent))
	fmt.Fprintf(w, "Started:       %s\n", ago(now, v.StartedAt))
	fmt.Fprintf(w, "Step started:  %s\n", ago(now, v.StepStartedAt))
	if plan.BackgroundAnalysis != "" {
		fmt.Fprintf(w, "Background:    analysis %s\n", plan.BackgroundAnalysis)
	}
	fmt.Fprintf(w, "\nSteps\n")
	byStep := map[int][]rule.Measurement{}
	var background []rule.Measurement
	for _, m := range v.Measurements {
		if m.Background {
			background = append(background, m)
		} else {
			byStep[m.Step] = append(byStep[m.Step], m)
		}
	}
	for i, s := range plan.Steps {
		sym := "○"
		switch {
		case i < v.Step || v.State == rule.RolloutCompleted:
			sym = "✔"
		case i == v.Step && v.State == rule.RolloutAborted:
			sym = "✖"
		case i == v.Step && v.State == rule.RolloutPaused:
			sym = "॥"
		case i == v.Step:
			sym = "►"
		}
		fmt.Fprintf(w, "  %s %2d  %s\n", sym, i, stepText(s, plan))
		for _, m := range byStep[i] {
			writeMeasurement(w, "        ", m)
		}
	}
	if len(background) > 0 {
		fmt.Fprintf(w, "\nBackground analysis %s\n", plan.BackgroundAnalysis)
		for _, m := range background {
			writeMeasurement(w, "  ", m)
		}
	}
}

func stepText(s rule.Step, plan *rule.Rollout) string {
	if s.Analysis == "" {
		return s.String()
	}
	a := plan.Analyses[s.Analysis]
	return fmt.Sprintf("analysis %s (%d × %s, failure_limit %d, inconclusive_limit %d)", s.Analysis, a.EffectiveCount(), a.Interval, a.FailureLimit, a.InconclusiveLimit)
}

var resultMarks = map[string]string{
	rule.ResultPassed:       "✔",
	rule.ResultFailed:       "✖",
	rule.ResultError:        "⚠",
	rule.ResultInconclusive: "?",
}

func writeMeasurement(w io.Writer, indent string, m rule.Measurement) {
	var parts, notes []string
	for _, c := range m.Checks {
		p := c.Check
		if c.Value != nil {
			p += " " + strconv.FormatFloat(*c.Value, 'g', 4, 64)
		}
		var extra []string
		if c.Threshold != "" {
			extra = append(extra, c.Threshold)
		}
		if c.Requests != nil {
			extra = append(extra, strconv.FormatUint(*c.Requests, 10)+" req")
		}
		if len(extra) > 0 {
			p += " (" + strings.Join(extra, ", ") + ")"
		}
		if c.Result != rule.ResultPassed {
			p += " " + c.Result
			if n := c.Message; n != "" && !slices.Contains(notes, n) {
				notes = append(notes, n)
			}
		}
		parts = append(parts, p)
	}
	line := strings.Join(parts, " · ")
	if len(notes) > 0 {
		line += " — " + strings.Join(notes, "; ")
	}
	fmt.Fprintf(w, "%s%s #%d %s  %-12s %s\n", indent, resultMarks[m.Result], m.Index, m.At.UTC().Format("15:04:05"), m.Result, line)
}
