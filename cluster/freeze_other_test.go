//go:build !unix

package cluster

import "os"

// freeze skips the test: stalling a process takes SIGSTOP, which only
// Unix has.
func (s *redisServer) freeze(bool) {
	s.t.Skip("freezing redis-server needs SIGSTOP (Unix only)")
}

func resume(*os.Process) {}
