package presence

import (
	"context"
	"errors"
	"sync"

	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/internal/sortedset"
)

// NewMemoryEngine returns an Engine that keeps presence in this process
// only: the default, and the right choice for one node. It delivers every
// edge and message to the Relay at once, on the caller's goroutine, so
// what a client did is visible to the next tick.
func NewMemoryEngine() Engine {
	return &memoryEngine{users: make(map[string]int), members: make(map[membership]struct{})}
}

type membership struct{ channel, uid string }

// memoryEvent is an edge that happened before Run gave the engine a Relay.
type memoryEvent struct {
	channel, uid string
	on           bool
}

type memoryEngine struct {
	// mu orders edges: the Relay sees them in the order they happened. It is
	// held while calling the Relay, which never calls back.
	mu          sync.Mutex
	users       map[string]int // uid -> connections; absent means offline
	online      sortedset.Set  // the keys of users, in order for listings
	members     map[membership]struct{}
	usersPeak   int
	membersPeak int
	relay       Relay
	early       []memoryEvent // edges before Run, delivered when it starts
	running     bool
}

func (e *memoryEngine) SetUser(uid string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	was := e.users[uid]
	if n <= 0 {
		delete(e.users, uid)
		e.users = shrink.Map(e.users, &e.usersPeak)
		e.online.Remove(uid)
	} else {
		e.users[uid] = n
		e.online.Add(uid)
	}
	if (was > 0) != (n > 0) {
		e.edgeLocked(memoryEvent{uid: uid, on: n > 0})
	}
}

func (e *memoryEngine) SetMember(channel, uid string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := membership{channel, uid}
	_, was := e.members[k]
	if n <= 0 {
		delete(e.members, k)
		e.members = shrink.Map(e.members, &e.membersPeak)
	} else {
		e.members[k] = struct{}{}
	}
	if was != (n > 0) {
		e.edgeLocked(memoryEvent{channel: channel, uid: uid, on: n > 0})
	}
}

func (e *memoryEngine) edgeLocked(ev memoryEvent) {
	if e.relay == nil {
		e.early = append(e.early, ev)
		return
	}
	deliverEdge(e.relay, ev)
}

func deliverEdge(r Relay, ev memoryEvent) {
	if ev.channel == "" {
		r.UserChanged(ev.uid, ev.on)
		r.Produced(ev.uid, ev.on)
	} else {
		r.MemberChanged(ev.channel, ev.uid, ev.on)
	}
}

func (e *memoryEngine) User(ctx context.Context, uid string) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.users[uid], nil
}

// Users lists from an ordered index: O(limit), whatever the count.
func (e *memoryEngine) Users(ctx context.Context, limit int) (int, []string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.users), e.online.First(limit), nil
}

// Publish hands m to the Relay on the caller's goroutine. Messages published
// before Run are dropped: nobody is connected yet.
func (e *memoryEngine) Publish(ctx context.Context, m Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	r := e.relay
	e.mu.Unlock()
	if r != nil {
		r.Deliver(m)
	}
	return nil
}

var errEngineRunning = errors.New("presence: memory engine: Run called twice")

// attach gives the engine its Relay ahead of Run, so a Node in this process
// sees every edge from its first connection on.
func (e *memoryEngine) attach(r Relay) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.relay = r
	for _, ev := range e.early {
		deliverEdge(r, ev)
	}
	e.early = nil
}

// Run delivers to r until ctx is done; the memory engine has nothing to
// wait for, as everything happens on its callers' goroutines.
func (e *memoryEngine) Run(ctx context.Context, r Relay) error {
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return errEngineRunning
	}
	e.running = true
	e.mu.Unlock()
	e.attach(r)
	<-ctx.Done()
	e.mu.Lock()
	e.running = false
	e.mu.Unlock()
	return ctx.Err()
}

func (e *memoryEngine) Health(ctx context.Context) error { return nil }
