package main

import (
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/experiment"
	"github.com/graygate/graygate/internal/stats"
)

// TestPrintResultsPhase: after the allocation changed, the results say
// since when the sample-ratio check judges, and on how many units of each
// group.
func TestPrintResultsPhase(t *testing.T) {
	r := &experiment.Results{
		Results: &stats.Results{Experiment: "e", Control: "A",
			Groups: []stats.GroupResult{{Name: "A"}, {Name: "B"}},
			SRM:    stats.SRM{Reason: "every group needs 8 units"}},
		Rule: "r", Store: "file",
		SRMSince: "2026-12-04T08:00:00Z", SRMUnits: map[string]int64{"A": 3, "B": 4},
	}
	var b strings.Builder
	printResults(&b, r)
	if !strings.Contains(b.String(), "SRM phase: since 2026-12-04T08:00:00Z") || !strings.Contains(b.String(), "units since: A 3, B 4") {
		t.Errorf("results:\n%s\nwant the SRM phase and its units", b.String())
	}
}
