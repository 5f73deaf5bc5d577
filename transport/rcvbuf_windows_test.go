package transport_test

import "syscall"

// setRcvBuf sets a socket's receive buffer, before it connects: a Windows
// socket is a Handle, not an int.
func setRcvBuf(fd uintptr, size int) error {
	return syscall.SetsockoptInt(syscall.Handle(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
}
