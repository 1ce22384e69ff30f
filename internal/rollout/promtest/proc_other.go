//go:build !linux

package promtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
