//go:build !linux

package transport_test

// pollable: without epoll every connection parks a reader.
const pollable = false
