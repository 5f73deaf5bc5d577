//go:build unix

package main

import "syscall"

// freeze and thaw stop and resume p's process, as a stalled machine would.
func (p *proc) freeze() { p.signal(syscall.SIGSTOP) }
func (p *proc) thaw()   { p.signal(syscall.SIGCONT) }
