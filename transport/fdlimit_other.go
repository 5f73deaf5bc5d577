//go:build !unix

package transport

import "errors"

// DescriptorLimit returns how many file descriptors this process may hold;
// on this system there is no limit to read.
func DescriptorLimit() (int, error) {
	return 0, errors.New("transport: descriptor limit: none on this system")
}
