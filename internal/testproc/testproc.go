// Package testproc holds what tests do to the real servers they start
// (etcd, Redis): hang one the way a stuck server hangs.
package testproc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Freeze stops process pid (SIGSTOP) without closing its sockets:
// requests are taken by the kernel and never answered, as by a hung
// server, until the returned function resumes it (SIGCONT). The test's end
// resumes it too. Freeze returns only once every thread has stopped: the
// signal is delivered asynchronously, and until then the server may still
// answer a request sent right after the call.
func Freeze(t testing.TB, pid int) (thaw func()) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP pid %d: %v", pid, err)
	}
	var once sync.Once
	thaw = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(thaw)
	if err := waitStopped(pid, 5*time.Second); err != nil {
		t.Fatalf("SIGSTOP pid %d: %v", pid, err)
	}
	return thaw
}

// waitStopped waits until every thread of pid is in the stopped state, as
// /proc shows it. Where there is no /proc it returns at once.
func waitStopped(pid int, limit time.Duration) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	deadline := time.Now().Add(limit)
	for {
		running, err := runningThreads(dir)
		if err == nil && running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not stopped within %v (%d threads running, %v)", limit, running, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads under a /proc/<pid>/task directory
// whose state is not stopped ('T', or 't' under a tracer).
func runningThreads(dir string) (int, error) {
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	running := 0
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread has exited
		}
		// "tid (comm) S ...": comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) {
			return 0, fmt.Errorf("unreadable %s/%s/stat", dir, task.Name())
		}
		if state := stat[i+2]; state != 'T' && state != 't' {
			running++
		}
	}
	return running, nil
}
