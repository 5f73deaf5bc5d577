package transport

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// memoryQueueLimit bounds the published messages waiting for Run; Publish
// waits for room beyond it. Presence edges are never refused (SetLocal must
// not block), but there is at most one pending edge per SetLocal call.
const memoryQueueLimit = 4096

// NewMemoryEngine returns an Engine that keeps presence in this process only:
// the default when Config.Engine is nil, and the right choice for one node.
func NewMemoryEngine() Engine {
	return &memoryEngine{
		local: make(map[string]int),
		wake:  make(chan struct{}, 1),
		room:  make(chan struct{}),
	}
}

type memoryEvent struct {
	uid    string // presence edge when msg is nil
	online bool
	msg    []byte
}

type memoryEngine struct {
	mu       sync.Mutex
	local    map[string]int // uid -> connections; absent means offline
	queue    []memoryEvent  // edges and messages not yet handed to Run
	messages int            // messages in queue
	wake     chan struct{}  // cap 1: queue became non-empty
	room     chan struct{}  // closed and replaced when Run takes the queue
	running  bool
}

func (e *memoryEngine) SetLocal(uid string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	was := e.local[uid]
	if n <= 0 {
		delete(e.local, uid)
	} else {
		e.local[uid] = n
	}
	switch {
	case was == 0 && n > 0:
		e.pushLocked(memoryEvent{uid: uid, online: true})
	case was > 0 && n <= 0:
		e.pushLocked(memoryEvent{uid: uid, online: false})
	}
}

func (e *memoryEngine) pushLocked(ev memoryEvent) {
	e.queue = append(e.queue, ev)
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *memoryEngine) Lookup(ctx context.Context, uid string) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.local[uid], nil
}

// Users sorts every online user on each call: O(n log n), fine for the one
// process this engine serves.
func (e *memoryEngine) Users(ctx context.Context, limit int) (int, []string, error) {
	e.mu.Lock()
	count := len(e.local)
	if limit <= 0 {
		e.mu.Unlock()
		return count, []string{}, nil
	}
	all := make([]string, 0, count)
	for uid := range e.local {
		all = append(all, uid)
	}
	e.mu.Unlock()
	slices.Sort(all)
	if len(all) > limit {
		all = all[:limit:limit]
	}
	return count, all, nil
}

func (e *memoryEngine) Publish(ctx context.Context, msg []byte) error {
	for {
		e.mu.Lock()
		if e.messages < memoryQueueLimit {
			e.messages++
			e.pushLocked(memoryEvent{msg: msg})
			e.mu.Unlock()
			return nil
		}
		room := e.room
		e.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var errEngineRunning = errors.New("transport: memory engine: Run called twice")

func (e *memoryEngine) Run(ctx context.Context, r Relay) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return errEngineRunning
	}
	e.running = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
	}()

	var batch []memoryEvent
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.wake:
		}
		e.mu.Lock()
		batch, e.queue = e.queue, batch[:0]
		e.messages = 0
		close(e.room)
		e.room = make(chan struct{})
		e.mu.Unlock()

		for _, ev := range batch {
			if ev.msg != nil {
				r.Broadcast(ev.msg)
			} else {
				r.PresenceChanged(ev.uid, ev.online)
			}
		}
		clear(batch)
	}
}

func (e *memoryEngine) Health(ctx context.Context) error { return nil }
