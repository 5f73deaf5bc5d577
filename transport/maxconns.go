package transport

import "runtime"

// fullness is what reserve found: room, or which cap is reached.
type fullness int

const (
	reserved fullness = iota
	nodeFull          // MaxConns: 503
	userFull          // MaxConnsPerUser: 429
)

// retryAfterFull is the Retry-After of an upgrade refused at MaxConns, in
// seconds: room comes back as connections close or time out, so a crowd
// refused at once should not all come back at once, nor wait for long.
const retryAfterFull = "10"

// MaxConnsWithin returns the MaxConns that keeps a process allowed limit
// file descriptors reachable at its cap: limit less a reserve for what is
// not a WebSocket. The reserve is 128 (standard streams, the listener, the
// poller, health probes, HTTP API calls and refused upgrades in flight,
// the webhook's connections) plus 10 a CPU for go-redis, whose pool holds
// up to 10 connections per GOMAXPROCS, but at most a quarter of limit, so
// a small limit still serves. A limit of 0 or less gives 0: no cap.
func MaxConnsWithin(limit int) int {
	if limit <= 0 {
		return 0
	}
	return max(limit-min(128+10*runtime.GOMAXPROCS(0), limit/4), 1)
}
