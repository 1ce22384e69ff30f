//go:build linux

package promtest

import "syscall"

// sysProcAttr makes the kernel kill prometheus when the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
