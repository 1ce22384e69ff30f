package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// logMark sends a request whose path carries a mark of its own, so that
// its access log line can be found, and returns the mark and the status.
func (e *env) logMark() (string, int) {
	mark := fmt.Sprintf("/mark-%d", time.Now().UnixNano())
	a, _ := e.get(mark, "X-User-Id", "1")
	return mark, a.status
}

// loggedIn waits up to 10s for the access log line of the request marked
// mark in one of files, and returns that file ("" when none shows it).
func loggedIn(mark string, files ...string) string {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, f := range files {
			data, _ := os.ReadFile(f)
			if strings.Contains(string(data), mark) {
				return f
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ""
}

// openFiles counts the process's file descriptors open on path, the file
// there now or one deleted since (Linux names it "path (deleted)").
func openFiles(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err == nil && strings.TrimSuffix(link, " (deleted)") == path {
			n++
		}
	}
	return n
}

// TestReloadAccessLogOffClosesFile: a reload that turns the access log off
// closes its file, so that one logrotate deleted is freed, while requests
// keep being served; turning it back on opens the file again and writes
// lines, and a new access_log.path lets the old file go. Toggling it
// under load fails no request (under -race: no write to a closed file).
func TestReloadAccessLogOffClosesFile(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir()) // /proc/self/fd shows the resolved path
	if err != nil {
		t.Fatal(err)
	}
	p, q := filepath.Join(dir, "access.log"), filepath.Join(dir, "other.log")
	accessLog := func(on bool, path string) string {
		return baseConfig + fmt.Sprintf("access_log: {enabled: %v, path: %s}\n", on, path)
	}
	e := start(t, accessLog(true, p), "")
	if mark, _ := e.logMark(); loggedIn(mark, p) != p {
		t.Fatalf("no access log line in %s", p)
	}
	// logrotate deleted the file; the gateway still holds it.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if n := openFiles(t, p); n != 1 {
		t.Fatalf("%d descriptors open on the deleted log before the reload, want 1", n)
	}

	if err := e.reload(accessLog(false, p)); err != nil {
		t.Fatal(err)
	}
	if n := openFiles(t, p); n != 0 {
		t.Errorf("%d descriptors still open on the deleted log after access_log.enabled: false, want 0", n)
	}
	off, status := e.logMark()
	if status != 200 {
		t.Errorf("a request with the access log off: %d, want 200", status)
	}

	if err := e.reload(accessLog(true, p)); err != nil {
		t.Fatal(err)
	}
	if n := openFiles(t, p); n != 1 {
		t.Errorf("%d descriptors open on the log turned back on, want 1", n)
	}
	if mark, _ := e.logMark(); loggedIn(mark, p) != p {
		t.Errorf("no access log line in %s after turning it back on", p)
	}
	if data, _ := os.ReadFile(p); strings.Contains(string(data), off) {
		t.Errorf("the request served while the access log was off was logged: %s", data)
	}

	if err := e.reload(accessLog(true, q)); err != nil {
		t.Fatal(err)
	}
	if np, nq := openFiles(t, p), openFiles(t, q); np != 0 || nq != 1 {
		t.Errorf("after access_log.path moved: %d descriptors on the old file, %d on the new; want 0 and 1", np, nq)
	}
	if mark, _ := e.logMark(); loggedIn(mark, p, q) != q {
		t.Errorf("no access log line in the new path %s", q)
	}

	var served, failed atomic.Int64
	var firstErr atomic.Value
	stop := underLoad(4, func(w, n int) {
		a, err := e.get(fmt.Sprintf("/load-%d-%d", w, n), "X-User-Id", "1")
		if err == nil && a.status != 200 {
			err = fmt.Errorf("status %d", a.status)
		}
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
			return
		}
		served.Add(1)
	})
	for i := range 10 {
		if err := e.reload(accessLog(i%2 == 1, q)); err != nil {
			stop()
			t.Fatal(err)
		}
		if n, want := openFiles(t, q), i%2; n != want {
			t.Errorf("toggle %d under load: %d descriptors on the log, want %d", i, n, want)
		}
	}
	stop()
	if failed.Load() > 0 || served.Load() == 0 {
		t.Errorf("under load while toggling the access log: %d served, %d failed (first: %v)", served.Load(), failed.Load(), firstErr.Load())
	}
	if mark, _ := e.logMark(); loggedIn(mark, q) != q {
		t.Errorf("no access log line in %s after toggling it under load", q)
	}
}
