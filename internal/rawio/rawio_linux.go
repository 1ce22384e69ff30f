package rawio

import (
	"syscall"
	"unsafe"
)

const supported = true

// read is read(2) without the scheduler's system-call bookkeeping; the
// descriptor is non-blocking, so the call never blocks.
func read(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

// write is write(2), as read is read(2).
func write(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}
