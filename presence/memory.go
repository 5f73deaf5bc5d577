package presence

import (
	"context"
	"sync"

	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/internal/sortedset"
)

// NewMemoryEngine returns an Engine that keeps presence in this process
// only: the default, and the right choice for one node. It delivers every
// edge and message to the Relay at once, on the caller's goroutine, so what
// a client did is visible to the next tick.
func NewMemoryEngine() Engine {
	return &memoryEngine{multi: make(map[string]int), channels: make(map[string]*sortedset.Set)}
}

type memoryEngine struct {
	relay Relay // set once by Attach, before any other call

	// mu guards the state below. It is never held while calling the Relay:
	// the Node makes one SetUser or SetMember call at a time, so edges
	// reach the Relay in the order they happened without it.
	mu       sync.Mutex
	online   sortedset.Set  // the users online, in order for listings
	multi    map[string]int // uid -> connections, for the users online with more than one
	channels map[string]*sortedset.Set

	multiPeak, channelsPeak int
}

func (e *memoryEngine) Attach(r Relay) { e.relay = r }

// Run has nothing to do: everything happens on the callers' goroutines.
func (e *memoryEngine) Run(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (e *memoryEngine) SetUser(uid string, n int) {
	e.mu.Lock()
	var was bool
	if n > 0 {
		was = !e.online.Add(uid)
	} else {
		was = e.online.Remove(uid)
	}
	if n > 1 {
		e.multi[uid] = n
	} else if _, ok := e.multi[uid]; ok {
		delete(e.multi, uid)
		e.multi = shrink.Map(e.multi, &e.multiPeak)
	}
	e.mu.Unlock()
	if was != (n > 0) {
		e.relay.UserChanged(uid, n > 0)
		e.relay.Produced(uid, n > 0)
	}
}

func (e *memoryEngine) SetMember(channel, uid string, n int) {
	e.mu.Lock()
	members := e.channels[channel]
	var changed bool
	switch {
	case n > 0:
		if members == nil {
			members = new(sortedset.Set)
			e.channels[channel] = members
		}
		changed = members.Add(uid)
	case members != nil:
		changed = members.Remove(uid)
		if members.Len() == 0 {
			delete(e.channels, channel)
			e.channels = shrink.Map(e.channels, &e.channelsPeak)
		}
	}
	e.mu.Unlock()
	if changed {
		e.relay.MemberChanged(channel, uid, n > 0)
	}
}

// Follow and Unfollow have nothing to do: this engine delivers everything.
func (e *memoryEngine) Follow(ctx context.Context, topics []Topic) error { return nil }
func (e *memoryEngine) Unfollow(topics []Topic)                          {}

func (e *memoryEngine) User(ctx context.Context, uid string) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n, ok := e.multi[uid]; ok {
		return n, nil
	}
	if e.online.Has(uid) {
		return 1, nil
	}
	return 0, nil
}

// Users lists from an ordered index: O(limit), whatever the count.
func (e *memoryEngine) Users(ctx context.Context, limit int) (int, []string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.online.Len(), e.online.First(limit), nil
}

func (e *memoryEngine) Members(ctx context.Context, channel string, limit int) (int, []string, error) {
	return e.MembersAfter(ctx, channel, "", limit)
}

func (e *memoryEngine) MembersAfter(ctx context.Context, channel, after string, limit int) (int, []string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	members := e.channels[channel]
	if members == nil {
		return 0, []string{}, nil
	}
	return members.Len(), members.After(after, limit), nil
}

// Publish hands m to the Relay on the caller's goroutine.
func (e *memoryEngine) Publish(ctx context.Context, m Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.relay.Deliver(m)
	return nil
}

func (e *memoryEngine) Health(ctx context.Context) error { return nil }
