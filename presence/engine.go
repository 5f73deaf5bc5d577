package presence

import (
	"context"

	"github.com/presenced/presenced/protocol"
)

// An Engine stores presence where every node can see it and routes edges and
// messages to the nodes that follow them: which users are online and who is
// a member of which channel, counted over the connections each node holds.
// NewMemoryEngine keeps it in this process; package cluster shares it
// through Redis.
//
// A Node calls Attach once, from New, before any other method; then Run for
// as long as it runs. It calls SetUser and SetMember in the order the counts
// changed for a given user (and channel), one call at a time, never holding
// a lock of its own. It calls Follow when a topic gets its first follower on
// the node and Unfollow when it loses its last; the calls for one topic
// never overlap and alternate, Follow first.
type Engine interface {
	// Attach hands the engine the Relay it delivers to, once, before
	// anything can produce an edge.
	Attach(r Relay)
	// Run does the engine's background work (for a networked engine:
	// reading what other nodes cause) until ctx is done. The Node calls it
	// again, after a pause, when it returns early with an error.
	Run(ctx context.Context) error

	// SetUser reports that this node now holds n live connections of uid
	// (0: none). It must not block on I/O: a networked engine batches.
	SetUser(uid string, n int)
	// SetMember reports that n of this node's live connections of uid have
	// joined channel (0: none). It must not block on I/O.
	SetMember(channel, uid string, n int)

	// Follow starts delivering topics to the Relay and returns once the
	// Relay has each topic's current state, or when ctx is done: the
	// following holds either way and the state arrives when it can. An
	// engine that delivers everything returns at once.
	Follow(ctx context.Context, topics []Topic) error
	// Unfollow stops delivering topics nobody on this node follows any more.
	Unfollow(topics []Topic)

	// User returns the number of live connections of uid on all nodes.
	User(ctx context.Context, uid string) (conns int, err error)
	// Users returns how many users are online on all nodes and up to limit
	// of their IDs in ascending order (limit <= 0: none).
	Users(ctx context.Context, limit int) (count int, users []string, err error)
	// Members returns how many members channel has on all nodes and up to
	// limit of their IDs in ascending order.
	Members(ctx context.Context, channel string, limit int) (count int, members []string, err error)
	// MembersAfter returns how many members channel has on all nodes and up
	// to limit of their IDs greater than after, in ascending order: a page
	// of a listing that goes on from after ("": from the first).
	MembersAfter(ctx context.Context, channel, after string, limit int) (count int, members []string, err error)

	// Publish delivers m to the Relays of the nodes that follow its topic,
	// this one included.
	Publish(ctx context.Context, m Message) error

	// Health reports whether the engine can reach what it shares presence
	// through; nil for the in-memory engine.
	Health(ctx context.Context) error
}

// A Relay receives what an Engine delivers. Each edge comes once, in the
// order it happened for its user (or user and channel): a user goes online
// when its first connection on any node appears and offline when its last
// one is gone; it joins a channel when its first connection in the channel
// joins it and leaves when its last one there leaves or closes. An engine
// that routes delivers only the topics its node follows. Relay methods never
// block on I/O and never call the Engine; an engine calls them holding none
// of its own locks, in the order of each topic's edges.
type Relay interface {
	// UserChanged reports a user's edge.
	UserChanged(uid string, online bool)
	// Produced reports an edge that this node's change (or its claim of a
	// dead node's records) produced: each edge reaches Produced on exactly
	// one node.
	Produced(uid string, online bool)
	MemberChanged(channel, uid string, joined bool)
	// SetMembers replaces what the Relay knows of channel's members with a
	// snapshot (when the node starts following the channel, or catches up
	// after losing what it shares presence through); the differences count
	// as edges.
	SetMembers(channel string, members []string)
	Deliver(m Message)
}

// A Topic is one channel or one user (exactly one field is set) that an
// Engine delivers to the nodes that follow it.
type Topic struct {
	Channel string
	UID     string
}

// A Message is for the connections of one user (UID) or for the members of
// one channel (Channel); exactly one of the two is set. It carries a frame
// encoded once, or with Disconnect set (and UID) it ends every connection of
// the user.
type Message struct {
	Channel    string
	UID        string
	Frame      protocol.Encoded
	Disconnect bool
}
