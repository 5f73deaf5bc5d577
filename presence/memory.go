package presence

import (
	"context"
	"time"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/internal/sortedset"
)

// NewMemoryEngine returns an Engine that keeps presence in this process
// only: the default, and the right choice for one node. It delivers every
// edge and message to the Relay at once, on the caller's goroutine, so what
// a client did is visible to the next tick.
func NewMemoryEngine() Engine {
	return &memoryEngine{
		multi:    make(map[string]int),
		away:     make(map[string]struct{}),
		channels: make(map[string]*sortedset.Set),
		awayIn:   make(map[membership]struct{}),
	}
}

type memoryEngine struct {
	relay Relay // set once by Attach, before any other call

	// mu guards the state below. It is never held while calling the Relay:
	// the Node makes one SetUser or SetMember call at a time, so edges
	// reach the Relay in the order they happened without it.
	mu       lockorder.Mutex[lockorder.Store]
	online   sortedset.Set  // the users online, in order for listings
	multi    map[string]int // uid -> connections, for the users online with more than one
	away     map[string]struct{}
	channels map[string]*sortedset.Set
	awayIn   map[membership]struct{} // the memberships of away users

	multiPeak, awayPeak, channelsPeak, awayInPeak int
}

type membership struct{ channel, uid string }

func (e *memoryEngine) Attach(r Relay) { e.relay = r }

// Run has nothing to do: everything happens on the callers' goroutines.
func (e *memoryEngine) Run(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (e *memoryEngine) SetUser(uid string, n, away int) {
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
	_, wasAway := e.away[uid]
	isAway := n > 0 && away >= n
	if isAway && !wasAway {
		e.away[uid] = struct{}{}
	} else if !isAway && wasAway {
		delete(e.away, uid)
		e.away = shrink.Map(e.away, &e.awayPeak)
	}
	e.mu.Unlock()
	now := time.Now()
	if was != (n > 0) {
		kind := EdgeOffline
		if n > 0 {
			kind = EdgeOnline
		}
		e.relay.UserChanged(uid, n > 0, now)
		e.relay.Produced(Edge{Kind: kind, UID: uid, At: now})
	}
	if n > 0 && isAway != (was && wasAway) {
		kind := EdgeActive
		if isAway {
			kind = EdgeAway
		}
		e.relay.ActivityChanged(uid, isAway)
		e.relay.Produced(Edge{Kind: kind, UID: uid, At: now})
	}
}

func (e *memoryEngine) SetMember(channel, uid string, n int, away bool) {
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
	key := membership{channel, uid}
	_, wasAway := e.awayIn[key]
	isAway := n > 0 && away
	if isAway && !wasAway {
		e.awayIn[key] = struct{}{}
	} else if !isAway && wasAway {
		delete(e.awayIn, key)
		e.awayIn = shrink.Map(e.awayIn, &e.awayInPeak)
	}
	e.mu.Unlock()
	if changed {
		kind := EdgeLeave
		if n > 0 {
			kind = EdgeJoin
		}
		e.relay.MemberChanged(channel, uid, n > 0)
		e.relay.Produced(Edge{Kind: kind, UID: uid, Channel: channel, At: time.Now()})
	}
	// A leave takes the member's activity with it.
	if n > 0 && isAway != (wasAway && !changed) {
		e.relay.MemberActivity(channel, uid, isAway)
	}
}

// Follow and Unfollow have nothing to do: this engine delivers everything.
func (e *memoryEngine) Follow(ctx context.Context, topics []Topic) error { return nil }
func (e *memoryEngine) Unfollow(topics []Topic)                          {}

// Status keeps no last-seen records: the Node does, for every edge of this
// engine.
func (e *memoryEngine) Status(ctx context.Context, uid string) (UserStatus, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, away := e.away[uid]
	if n, ok := e.multi[uid]; ok {
		return UserStatus{Conns: n, Away: away}, nil
	}
	if e.online.Has(uid) {
		return UserStatus{Conns: 1, Away: away}, nil
	}
	return UserStatus{}, nil
}

// Users lists from an ordered index: O(limit), whatever the count.
func (e *memoryEngine) Users(ctx context.Context, limit int) (int, []string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.online.Len(), e.online.First(limit), nil
}

func (e *memoryEngine) Members(ctx context.Context, channel, after string, limit int) (int, []string, error) {
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
