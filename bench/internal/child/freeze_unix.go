//go:build unix

package child

import "syscall"

// Freeze and Thaw stop and resume the process, as a stalled machine would.
func (p *Proc) Freeze() error { return p.Signal(syscall.SIGSTOP) }

// Thaw resumes a process Freeze stopped.
func (p *Proc) Thaw() error { return p.Signal(syscall.SIGCONT) }
