//go:build !linux

package etcdtest

import "syscall"

// sysProcAttr has nothing to add outside Linux: there the server is only
// killed by t.Cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }
