package etcdtest

import "syscall"

// sysProcAttr makes the kernel kill etcd when the test process dies, so a
// crashed or timed-out test never leaves a server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
