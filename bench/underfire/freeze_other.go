//go:build !unix

package main

// freeze and thaw need SIGSTOP and SIGCONT, which this system lacks: the
// freeze scenario then runs without the freeze, and says so.
func (p *proc) freeze() { progress("%s: cannot freeze a process on this system", p.name) }
func (p *proc) thaw()   {}
