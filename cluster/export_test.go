package cluster

// crash stops renewing without dropping anything, as if the process died.
func (e *Engine) crash() {
	e.closeOnce.Do(func() {
		e.p.halt()
		e.withdrawOnce.Do(e.w.halt)
	})
}
