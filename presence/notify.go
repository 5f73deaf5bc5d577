package presence

import (
	"sync"

	"github.com/presenced/presenced/internal/lockorder"
)

// notifier tells the embedder's callbacks of the edges this node produced,
// on a goroutine of its own, started when edges arrive and gone when there
// are none, one call at a time and in order, so a slow callback never holds
// up the Node: each edge to onPresence or onActivity as it comes, and each
// tick's edges at once to onEdges.
type notifier struct {
	onPresence func(uid string, online bool)
	onActivity func(uid string, away bool)
	onEdges    func([]Edge)

	mu      lockorder.Mutex[lockorder.Notify]
	idle    sync.Cond // signalled when running turns false
	tick    []Edge    // this tick's edges for onEdges
	queue   []note
	running bool
	closed  bool
}

// note is one call to make: an edge, or a tick's edges.
type note struct {
	e    Edge
	tick []Edge
}

func (n *notifier) wants(e Edge) (one, tick bool) {
	switch e.Kind {
	case EdgeOnline, EdgeOffline:
		one = n.onPresence != nil
	case EdgeAway, EdgeActive:
		one = n.onActivity != nil
	}
	return one, n.onEdges != nil
}

func (n *notifier) push(e Edge) {
	one, tick := n.wants(e)
	if !one && !tick {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if tick {
		n.tick = append(n.tick, e)
	}
	if one {
		n.queue = append(n.queue, note{e: e})
		n.startLocked()
	}
}

// endTick hands this tick's edges to onEdges.
func (n *notifier) endTick() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.tick) == 0 || n.closed {
		return
	}
	n.queue = append(n.queue, note{tick: n.tick})
	n.tick = nil
	n.startLocked()
}

func (n *notifier) startLocked() {
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
		for _, x := range batch {
			switch {
			case x.tick != nil:
				n.onEdges(x.tick)
			case x.e.Kind == EdgeOnline || x.e.Kind == EdgeOffline:
				n.onPresence(x.e.UID, x.e.Kind == EdgeOnline)
			default:
				n.onActivity(x.e.UID, x.e.Kind == EdgeAway)
			}
		}
	}
}

// close hands over the edges of the tick so far, waits for the calls
// queued, and drops later edges.
func (n *notifier) close() {
	n.endTick()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for n.running {
		n.idle.Wait()
	}
}
