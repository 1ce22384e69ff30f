package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/graygate/graygate/internal/mirror"
)

// cmdDiff prints a rule's mirror diff: GET /api/v1/rules/{key}/diff as a
// table of fields, regressions first.
func cmdDiff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, fs, err := newClient("diff", readOnly, args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"usage: graygate diff KEY [--admin ADDR --token TOKEN -o text|json]: the response diff of a rule's mirror"}
	}
	raw, err := c.do(ctx, "GET", rulePath(fs.Arg(0))+"/diff", nil, nil)
	if err != nil {
		return err
	}
	if c.output == "json" {
		c.printJSON(raw)
		return nil
	}
	var d mirror.Document
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("decode the diff: %w", err)
	}
	printDiff(stdout, &d)
	return nil
}

func printDiff(w io.Writer, d *mirror.Document) {
	fmt.Fprintf(w, "rule %s mirrors to %s", d.Rule, d.Target)
	if d.Secondary != "" {
		fmt.Fprintf(w, ", noise from %s", d.Secondary)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "requests %d, compared %d, status mismatches %d, failed %d, dropped %d", d.Requests, d.Compared, d.StatusMismatch, d.Failed, d.Dropped)
	if d.Secondary != "" {
		fmt.Fprintf(w, ", noise compared %d (secondary failed %d)", d.NoiseCompared, d.SecondaryFailed)
	}
	fmt.Fprintln(w)
	if !d.Diff {
		fmt.Fprintln(w, "the mirror has no \"diff\": answers are not compared")
		return
	}
	th := d.Thresholds
	fmt.Fprintf(w, "regression: raw − noise > %g%% and (raw − noise)/(raw + noise) > %g%%, after %d compared answers\n",
		th.Absolute*100, th.Relative*100, th.MinCompared)
	if d.UntrackedDifferences > 0 {
		fmt.Fprintf(w, "%d differences in fields beyond the tracked ones\n", d.UntrackedDifferences)
	}
	if len(d.Fields) == 0 {
		fmt.Fprintln(w, "no field differed")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tRAW\tNOISE\tREGRESSION\tEXAMPLE")
	for _, f := range d.Fields {
		reg := "no"
		if f.Regression {
			reg = "YES"
		}
		ex := ""
		if len(f.Examples) > 0 {
			e := f.Examples[0]
			ex = oneLine(fmt.Sprintf("%s: %s → %s", e.Request, e.Primary, e.Candidate))
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%.1f%%\t%s\t%s\n", f.Path, f.RawRate*100, f.NoiseRate*100, reg, ex)
	}
	tw.Flush()
}

// oneLine keeps an example (a body may hold tabs and newlines) on its row.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
