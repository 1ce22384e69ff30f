package rawio

import (
	"syscall"
	"unsafe"
)

const supported = true

// read is recv(2) (recvfrom with no address) without the scheduler's
// system-call bookkeeping; the descriptor is non-blocking, so the call never
// blocks. On a connected TCP socket it reads what read(2) would, but the
// kernel goes straight to the socket instead of through the file layer
// (vfs_read, the position lock, rw_verify_area), as nginx's reads do.
func read(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
	return int(n), e
}

// write is send(2) (sendto with no address), as read is recv(2).
// MSG_NOSIGNAL makes a write to a connection the peer reset fail with EPIPE
// without raising SIGPIPE, which the runtime would otherwise field and
// ignore.
func write(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), syscall.MSG_NOSIGNAL, 0, 0)
	return int(n), e
}
