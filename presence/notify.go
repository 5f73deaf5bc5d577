package presence

import "sync"

// notifier calls fn for each pushed edge on a goroutine of its own, started
// when edges arrive and gone when there are none, one call at a time and in
// order, so a slow OnPresence never holds up the Node.
type notifier struct {
	fn func(uid string, online bool)

	mu      sync.Mutex
	idle    sync.Cond // signalled when running turns false
	queue   []edge
	running bool
	closed  bool
}

func (n *notifier) push(uid string, online bool) {
	if n.fn == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.queue = append(n.queue, edge{uid, online})
	if !n.running {
		n.running = true
		go n.run()
	}
}

func (n *notifier) run() {
	for {
		n.mu.Lock()
		batch := n.queue
		n.queue = nil
		if len(batch) == 0 {
			n.running = false
			n.idle.Broadcast()
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		for _, e := range batch {
			n.fn(e.uid, e.on)
		}
	}
}

// close waits for the calls queued so far; later edges are dropped.
func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for n.running {
		n.idle.Wait()
	}
}
