package presence

import "context"

// An Engine keeps presence where every node can see it: which users are
// online and who is a member of which channel, counted over the connections
// each node holds, and it carries messages to the clients of every node.
// NewMemoryEngine keeps it in this process; package cluster shares it
// through Redis.
//
// The Node calls SetUser and SetMember in the order the counts changed for a
// given user (and channel), possibly while holding its own lock, so they
// must not block on I/O: a networked engine batches.
type Engine interface {
	// SetUser reports that this node now holds n live connections of uid
	// (0: none).
	SetUser(uid string, n int)
	// SetMember reports that n of this node's live connections of uid have
	// joined channel (0: none).
	SetMember(channel, uid string, n int)

	// User returns the number of live connections of uid on all nodes.
	User(ctx context.Context, uid string) (conns int, err error)
	// Users returns how many users are online on all nodes and up to limit
	// of their IDs in ascending order (limit <= 0: none).
	Users(ctx context.Context, limit int) (count int, users []string, err error)

	// Publish delivers m to the clients it is for on every node, this one
	// included, through each node's Relay.
	Publish(ctx context.Context, m Message) error

	// Run delivers to r, until ctx is done, the edges and messages that
	// other nodes cause. The Node calls it once at a time. An engine may
	// also call r from SetUser, SetMember and Publish, on the caller's
	// goroutine, for what this node causes.
	Run(ctx context.Context, r Relay) error

	// Health reports whether the engine can reach what it shares presence
	// through; nil for the in-memory engine.
	Health(ctx context.Context) error
}

// A Relay receives what an Engine delivers. Each edge comes once, in the
// order it happened for its user (or user and channel): a user goes online
// when its first connection on any node appears and offline when its last
// one is gone; it joins a channel when its first connection in the channel
// joins it and leaves when its last one there leaves or closes. Relay
// methods never block on I/O and never call the Engine.
type Relay interface {
	UserChanged(uid string, online bool)
	MemberChanged(channel, uid string, joined bool)
	Deliver(m Message)
}

// A Message is a complete JSON text frame for the connections of one user
// (UID) or for the members of one channel (Channel); exactly one of the two
// is set.
type Message struct {
	Channel string `json:"channel,omitempty"`
	UID     string `json:"uid,omitempty"`
	Frame   []byte `json:"frame"`
}
