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
	// UserChanged reports a user's edge: every user's, or for a Router
	// only those of the users this node follows.
	UserChanged(uid string, online bool)
	// Produced reports an edge that this node's change (or its claim of a
	// dead node's records) produced: each edge reaches Produced on exactly
	// one node.
	Produced(uid string, online bool)
	MemberChanged(channel, uid string, joined bool)
	// SetMembers replaces what the Relay knows of channel's members with a
	// snapshot (a Router's, when it starts following the channel or
	// catches up after losing Redis); the differences count as edges.
	SetMembers(channel string, members []string)
	Deliver(m Message)
}

// A Router is an Engine that delivers to a node only the edges and messages
// of the channels and users it follows, as a networked engine does so that
// no node hears of everything. The Node follows each channel one of its
// connections joined, each user one of them watches, and the users it holds
// connections of (for messages to them). An Engine that is not a Router
// delivers everything.
type Router interface {
	Engine
	// Follow counts one more follower of each topic and returns once the
	// Relay has each topic's current state, or when ctx is done; the
	// following holds either way and the state arrives when it can.
	Follow(ctx context.Context, topics []Topic) error
	// Unfollow counts one follower less of each topic; a topic nobody
	// follows any more is dropped from the Relay.
	Unfollow(topics []Topic)
	// Members returns how many members channel has on all nodes and up to
	// limit of their IDs in ascending order.
	Members(ctx context.Context, channel string, limit int) (count int, members []string, err error)
}

// A Topic is one channel or one user (exactly one field is set) that a
// Router delivers to its followers.
type Topic struct {
	Channel string
	UID     string
}

// A Message is for the connections of one user (UID) or for the members of
// one channel (Channel); exactly one of the two is set. It carries a
// complete JSON text frame, or with Disconnect set (and UID) it ends every
// connection of the user.
type Message struct {
	Channel    string
	UID        string
	Frame      []byte
	Disconnect bool
}
