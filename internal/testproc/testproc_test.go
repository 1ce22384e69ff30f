package testproc

import (
	"fmt"
	"os/exec"
	"testing"
	"time"
)

// TestFreezeReturnsStopped: Freeze returns only once every thread of a
// busy process has stopped, and thaw lets it run again.
func TestFreezeReturnsStopped(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dir := fmt.Sprintf("/proc/%d/task", cmd.Process.Pid)
	if running, err := runningThreads(dir); err != nil || running == 0 {
		t.Fatalf("before Freeze: %d threads running (%v), want the busy loop's", running, err)
	}
	thaw := Freeze(t, cmd.Process.Pid)
	if running, err := runningThreads(dir); err != nil || running != 0 {
		t.Fatalf("Freeze returned with %d threads running (%v)", running, err)
	}
	thaw()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if running, _ := runningThreads(dir); running > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("still stopped 5s after thaw")
		}
		time.Sleep(time.Millisecond)
	}
}
