package gateway

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAccessLogWriteFailuresCounted: an access log whose writes fail (here
// /dev/full, a disk that is full) costs no request, and the lines it loses
// are not lost silently: /metrics counts them in
// graygate_access_log_dropped_total and the gateway's log says once that
// writes fail, naming the path and the error. Moving access_log.path to a
// writable file by a reload logs that writes succeed again, and the counter
// keeps what it counted.
func TestAccessLogWriteFailuresCounted(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	logs := &syncBuffer{}
	cfg := func(path string) string {
		return baseConfig + fmt.Sprintf("access_log: {enabled: true, path: %s}\n", path)
	}
	e := startWith(t, cfg("/dev/full"), "", func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	const n = 20
	for i := range n {
		a, err := e.get(fmt.Sprintf("/full-%d", i), "X-User-Id", "1")
		if err != nil || a.status != 200 {
			t.Fatalf("request %d with the access log's disk full: %+v %v", i, a, err)
		}
	}
	dropped := func() float64 {
		v, _ := strconv.ParseFloat(e.metric("graygate_access_log_dropped_total"), 64)
		return v
	}
	deadline := time.Now().Add(10 * time.Second)
	for dropped() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.metric("graygate_access_log_dropped_total"); dropped() < n {
		t.Fatalf("graygate_access_log_dropped_total = %q after %d lines written to /dev/full, want at least %d", got, n, n)
	}
	if l := logs.String(); strings.Count(l, "log write failed") != 1 || !strings.Contains(l, `"path":"/dev/full"`) || !strings.Contains(l, "no space left on device") {
		t.Errorf("the log should say once that access log writes fail, with the path and the error:\n%s", l)
	}

	p := filepath.Join(t.TempDir(), "access.log")
	if err := e.reload(cfg(p)); err != nil {
		t.Fatal(err)
	}
	if mark, _ := e.logMark(); loggedIn(mark, p) != p {
		t.Fatalf("no access log line in %s after moving off /dev/full", p)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "log writes succeed again") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if l := logs.String(); !strings.Contains(l, "log writes succeed again") {
		t.Errorf("the log does not say that access log writes succeed again:\n%s", l)
	}
	if v := dropped(); v < n {
		t.Errorf("graygate_access_log_dropped_total = %v after the reload, want at least %d: a counter never goes down", v, n)
	}
}
