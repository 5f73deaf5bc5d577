//go:build !unix

package child

import "errors"

var errNoFreeze = errors.New("cannot freeze a process on this system")

// Freeze and Thaw need SIGSTOP and SIGCONT, which this system lacks.
func (p *Proc) Freeze() error { return errNoFreeze }

// Thaw resumes a process Freeze stopped.
func (p *Proc) Thaw() error { return nil }
