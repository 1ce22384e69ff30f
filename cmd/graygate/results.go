package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/graygate/graygate/internal/experiment"
)

const resultsUsage = `usage: graygate results KEY [--admin ADDR] [--token TOKEN] [-o text|json]
  KEY is an ab rule's key (or its experiment_id); prints each group's units,
  each metric's mean, the lift against the control group with its 95% CI and
  p-value, and the sample-ratio-mismatch verdict`

// cmdResults prints an experiment's results (GET
// /api/v1/experiments/{key}/results) as a table.
func cmdResults(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, fs, err := newClient("results", readOnly, args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{resultsUsage}
	}
	raw, err := c.do(ctx, "GET", "/api/v1/experiments/"+url.PathEscape(fs.Arg(0))+"/results", nil, nil)
	if err != nil {
		return err
	}
	if c.output == "json" {
		c.printJSON(raw)
		return nil
	}
	var res experiment.Results
	if err := json.Unmarshal(raw, &res); err != nil || res.Results == nil {
		return fmt.Errorf("decode the results: %v", err)
	}
	printResults(stdout, &res)
	return nil
}

// printResults writes the table: one row per group, and per metric its
// mean, the lift against control with its 95% interval, and the p-value.
func printResults(w io.Writer, r *experiment.Results) {
	kind := "fixed-horizon Welch t-tests"
	if r.Sequential {
		kind = fmt.Sprintf("always-valid (sequential, tuning %g)", r.SequentialTuning)
	}
	state := ""
	if r.RolledBack {
		state = "; ROLLED BACK: new users go to control and are not exposed"
	}
	fmt.Fprintf(w, "experiment %s (rule %s, version %d, control %s, store %s, %s%s)\n",
		r.Experiment, r.Rule, r.RuleVersion, r.Control, r.Store, kind, state)
	var metrics []string
	if len(r.Groups) > 0 {
		for _, c := range r.Comparisons {
			if !contains(metrics, c.Metric) {
				metrics = append(metrics, c.Metric)
			}
		}
		var rest []string
		for name := range r.Groups[0].Metrics {
			if !contains(metrics, name) {
				rest = append(rest, name)
			}
		}
		slices.Sort(rest)
		metrics = append(metrics, rest...)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"GROUP", "WEIGHT", "UNITS"}
	for _, m := range metrics {
		head = append(head, strings.ToUpper(m), "LIFT (95% CI)", "P-VALUE")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, g := range r.Groups {
		row := []string{g.Name, fmt.Sprintf("%g%%", g.Weight), fmt.Sprint(g.Units)}
		for _, m := range metrics {
			mr := g.Metrics[m]
			row = append(row, num(mr.Mean))
			if g.Name == r.Control {
				row = append(row, "(control)", "")
				continue
			}
			lift, p := "—", "—"
			for _, c := range r.Comparisons {
				if c.Group != g.Name || c.Metric != m {
					continue
				}
				if c.Lift != nil {
					lift = pct(*c.Lift)
					if c.CI95 != nil {
						lift += fmt.Sprintf(" [%s, %s]", pct(c.CI95[0]), pct(c.CI95[1]))
					}
				}
				if c.PValue != nil {
					p = fmt.Sprintf("%.4g", *c.PValue)
				}
				if c.Lift == nil && c.Reason != "" {
					lift = "— (" + c.Reason + ")"
				}
			}
			row = append(row, lift, p)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	s := r.SRM
	if r.SRMSince != "" {
		var units []string
		for _, g := range r.Groups {
			if n, ok := r.SRMUnits[g.Name]; ok {
				units = append(units, fmt.Sprintf("%s %d", g.Name, n))
			}
		}
		fmt.Fprintf(w, "SRM phase: since %s (the allocation changed, or the rule was resumed after a freeze); units since: %s\n", r.SRMSince, strings.Join(units, ", "))
	}
	switch {
	case !s.Judged:
		fmt.Fprintf(w, "SRM: not judged yet (%s)\n", s.Reason)
	case s.OK:
		fmt.Fprintf(w, "SRM: ok (p = %s ≥ %g, χ² = %s, df %d; sequential p = %s)\n", num(s.PValue), s.Threshold, num(s.Chi2), s.DF, num(s.SequentialPValue))
	default:
		fmt.Fprintf(w, "SRM: MISMATCH (p = %s < %g, χ² = %s, df %d; sequential p = %s): the split does not match the weights; do not trust these results\n",
			num(s.PValue), s.Threshold, num(s.Chi2), s.DF, num(s.SequentialPValue))
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// num formats a possibly undefined number.
func num(p *float64) string {
	if p == nil {
		return "—"
	}
	if v := math.Abs(*p); v != 0 && (v < 1e-3 || v >= 1e6) {
		return fmt.Sprintf("%.3g", *p)
	}
	return fmt.Sprintf("%.4f", *p)
}

// pct formats a relative difference as a signed percentage.
func pct(x float64) string { return fmt.Sprintf("%+.2f%%", 100*x) }
