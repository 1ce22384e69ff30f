package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills redis-server if the test binary dies without running
// its cleanups (a panic, a timeout), so no server outlives its test.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
