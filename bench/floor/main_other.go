//go:build !linux

package main

import (
	"fmt"
	"os"
)

// The floor is an epoll server: on other systems it only says so.
func main() {
	fmt.Fprintln(os.Stderr, "floor: runs on Linux only (it is an epoll server)")
	os.Exit(2)
}
