//go:build unix

package cluster

import (
	"os"
	"syscall"

	"github.com/stretchr/testify/require"
)

// freeze stops (SIGSTOP) or resumes (SIGCONT) the server: a stalled Redis
// that keeps its data and its connections.
func (s *redisServer) freeze(on bool) {
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	require.NoError(s.t, s.cmd.Process.Signal(sig))
}

func resume(p *os.Process) { _ = p.Signal(syscall.SIGCONT) }
