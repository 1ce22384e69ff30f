package gateway

import (
	"path/filepath"
	"testing"
)

// TestFixedSeriesStartAtZero: the series of a fixed label set are on
// /metrics at 0 from the start, so that increase() and rate() see their
// first event: graygate_reloads_total{result="error"} appearing only at its
// first failed reload, at 1, showed no increase, and an alert on failed
// reloads missed the first one.
func TestFixedSeriesStartAtZero(t *testing.T) {
	e := start(t, baseConfig, "")
	for _, s := range []string{
		`graygate_reloads_total{result="error"}`,
		`graygate_reloads_total{result="partial"}`,
		`graygate_identity_rejected_total{reason="too_long"}`,
	} {
		if v, ok := e.metricLine(s); !ok || v != "0" {
			t.Errorf("%s = %q (present %v) at start, want 0", s, v, ok)
		}
	}
	bad := baseConfig + "access_log: {enabled: true, path: " + filepath.Join(t.TempDir(), "missing", "access.log") + "}\n"
	if err := e.reload(bad); err == nil {
		t.Fatal("a reload to an access log in a missing directory succeeded")
	}
	if v, _ := e.metricLine(`graygate_reloads_total{result="error"}`); v != "1" {
		t.Errorf(`graygate_reloads_total{result="error"} = %q after one failed reload, want 1`, v)
	}
}
