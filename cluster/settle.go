package cluster

import (
	"context"
	"time"
)

// settle waits until the changes handed to the writer are written and their
// edges handed to the Relay, while Redis answers, the loop runs and ctx
// lasts. Halting the loop cancels what it has under way, and a write whose
// answer is cut off has made its edges in Redis for nobody to hear; so a
// node on its way down lets its last writes land first.
func (w *writer) settle(ctx context.Context) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		idle := w.pending.n == 0 && w.inflight == 0 && len(w.recOps) == 0 && w.recInflight == 0 && len(w.repub) == 0
		w.mu.Unlock()
		if idle || w.health.isDown() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case <-tick.C:
		}
	}
}
