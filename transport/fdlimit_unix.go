//go:build unix

package transport

import (
	"fmt"
	"math"
	"syscall"
)

// DescriptorLimit returns how many file descriptors this process may hold
// (RLIMIT_NOFILE). Go raises the soft limit to the hard one at start, so
// this is the hard limit unless the process lowered it since.
func DescriptorLimit() (int, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("transport: descriptor limit: %w", err)
	}
	if l.Cur > math.MaxInt32 { // unlimited, in effect
		return math.MaxInt32, nil
	}
	return int(l.Cur), nil
}
