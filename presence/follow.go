package presence

import (
	"context"

	"github.com/presenced/presenced/internal/shrink"
)

// followers counts each topic's followers on this node: its connections
// that joined the channel, hold the user or watch it. The Engine hears of a
// topic only when the count goes 0->1 (Follow) and 1->0 (Unfollow).
type followers struct {
	// The counts, by channel and by user: a topic is one or the other, and
	// a string key is half the size of a Topic. Absent: none.
	byChannel, byUser map[string]int
	// calls holds, for a topic whose last 0<->1 change has an Engine call
	// under way, a channel closed when it returns: a call waits for the one
	// before it, so the calls for one topic never overlap and come in the
	// order the counts changed. A topic leaves it once its call returned,
	// so a followed topic costs its count only.
	calls map[Topic]chan struct{}

	channelsPeak, usersPeak, callsPeak int
}

func (f *followers) count(t Topic) int {
	if t.Channel != "" {
		return f.byChannel[t.Channel]
	}
	return f.byUser[t.UID]
}

func (f *followers) set(t Topic, n int) {
	m, peak, key := &f.byUser, &f.usersPeak, t.UID
	if t.Channel != "" {
		m, peak, key = &f.byChannel, &f.channelsPeak, t.Channel
	}
	if n > 0 {
		(*m)[key] = n
		return
	}
	delete(*m, key)
	*m = shrink.Map(*m, peak)
}

func channelTopics(channels []string) []Topic {
	ts := make([]Topic, len(channels))
	for i, ch := range channels {
		ts[i] = Topic{Channel: ch}
	}
	return ts
}

func userTopics(uids []string) []Topic {
	ts := make([]Topic, len(uids))
	for i, uid := range uids {
		ts[i] = Topic{UID: uid}
	}
	return ts
}

// follow counts one more follower of each topic and returns once the Relay
// has each topic's state, or when ctx is done: past it the state follows as
// edges.
func (n *Node) follow(ctx context.Context, topics []Topic) {
	if len(topics) == 0 {
		return
	}
	var first []Topic
	var before, wait []chan struct{}
	var mine chan struct{} // made only if this call makes an Engine call
	n.mu.Lock()
	for _, t := range topics {
		count := n.refs.count(t) + 1
		n.refs.set(t, count)
		call := n.refs.calls[t]
		if count == 1 {
			if call != nil {
				before = append(before, call)
			}
			if mine == nil {
				mine = make(chan struct{})
			}
			n.refs.calls[t] = mine
			first = append(first, t)
		} else if call != nil {
			wait = append(wait, call) // the first follower's Follow may still wait for the state
		}
	}
	n.mu.Unlock()
	if len(first) > 0 {
		for _, ch := range before {
			<-ch // an Unfollow, which does not block
		}
		if err := n.engine.Follow(ctx, first); err != nil {
			n.log.Debug("presence: following without the state yet", "topics", len(first), "err", err)
		}
		n.settled(first, mine)
	}
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// unfollow counts one follower less of each topic, and tells the Engine of
// those nobody follows any more once their Follow returned.
func (n *Node) unfollow(topics []Topic) {
	if len(topics) == 0 {
		return
	}
	var last []Topic
	var before []chan struct{}
	var mine chan struct{} // made only if this call makes an Engine call
	n.mu.Lock()
	for _, t := range topics {
		count := n.refs.count(t)
		if count == 0 {
			continue
		}
		n.refs.set(t, count-1)
		if count == 1 {
			if call := n.refs.calls[t]; call != nil {
				before = append(before, call)
			}
			if mine == nil {
				mine = make(chan struct{})
			}
			n.refs.calls[t] = mine
			last = append(last, t)
		}
	}
	n.mu.Unlock()
	if len(last) == 0 {
		return
	}
	call := func() {
		for _, ch := range before {
			<-ch
		}
		n.engine.Unfollow(last)
		n.settled(last, mine)
	}
	for _, ch := range before {
		select {
		case <-ch:
		default:
			// A Follow still waits for its state: unfollow after it, without
			// holding up the caller.
			go call()
			return
		}
	}
	call()
}

// settled marks the Engine call for topics, made under done, as returned.
func (n *Node) settled(topics []Topic, done chan struct{}) {
	close(done)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range topics {
		if n.refs.calls[t] == done { // else a later call is under way
			delete(n.refs.calls, t)
			n.refs.calls = shrink.Map(n.refs.calls, &n.refs.callsPeak)
		}
	}
}
