//go:build !windows

package transport_test

import "syscall"

// setRcvBuf sets a socket's receive buffer, before it connects.
func setRcvBuf(fd uintptr, size int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
}
