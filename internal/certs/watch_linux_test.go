package certs

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/certs/certstest"
)

// lockedBuffer is a log destination that is safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

// TestWatchSurvivesOverflow: when the kernel's inotify queue overflows (a
// burst of file activity in a watched directory while the watcher was
// busy), the watch logs it, reads the files again and goes on, instead of
// ending for good: a rotation after the burst still reaches new
// handshakes.
func TestWatchSurvivesOverflow(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skipf("inotify queue size: %v", err)
	}
	queue, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || queue > 1<<18 {
		t.Skipf("inotify queue of %q events: too large to overflow here", raw)
	}
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	first := ca.Server("s.pem", "s.key", "gw.test")
	var logs lockedBuffer
	st, err := New(Settings{Certificates: []Pair{{first.CertFile, first.KeyFile}}}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr, watching, stop := watch(t, st)

	// Hold the watch loop: it takes st.mu to watch the directories of an
	// Update. New's own Update signal is taken first.
	waitDrained := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(st.updated) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the watch loop does not take Update's signal")
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitDrained()
	st.mu.Lock()
	st.updated <- struct{}{}
	waitDrained()
	// Two events per file (create, modify): more than the kernel's queue
	// and the watcher's read buffer (4096 events) hold.
	for i := range (queue+8192)/2 + 1024 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("noise-%d", i)), []byte("x"), 0o600); err != nil {
			st.mu.Unlock()
			t.Fatal(err)
		}
	}
	st.mu.Unlock()

	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "overflow") {
		select {
		case err := <-watching:
			t.Fatalf("Watch ended after the overflow: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no overflow reported; log: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	rotated := ca.Server("s.pem", "s.key", "gw.test")
	waitSerial(t, addr, ca, rotated.Serial)
	stop()
}
