package presence

import (
	"context"
	"time"

	"github.com/presenced/presenced/protocol"
)

// An Engine keeps presence where every node can see it and routes what
// happens to the nodes that follow it. It does two jobs, as two interfaces:
// a Store of who is online and who is a member of which channel, counted
// over the connections each node holds, and a Router of the Store's edges
// and of messages to the nodes that follow their topics. NewMemoryEngine
// keeps both in this process; package cluster shares them through Redis.
// An engine whose store can be out of reach says so by implementing
// HealthChecker.
//
// A Node calls Attach once, from New, before any other method; then Run for
// as long as it runs. It keeps the reference counts of its topics itself:
// it calls Follow when a topic gets its first follower on the node and
// Unfollow when it loses its last.
type Engine interface {
	Store
	Router
	// Attach hands the engine the Relay it delivers to, once, before
	// anything can produce an edge.
	Attach(r Relay)
	// Run does the engine's background work (for a networked engine:
	// reading what other nodes cause) until ctx is done. The Node calls it
	// again, after a pause, when it returns early with an error.
	Run(ctx context.Context) error
}

// A Store keeps the users online and the members of each channel, counted
// over the connections each node holds, and hands the edges those counts
// make to the Relay (through the Router, which delivers them to the nodes
// that follow them). The Node calls SetUser and SetMember in the order the
// counts changed for a given user (and channel), one call at a time, never
// holding a lock of its own.
type Store interface {
	// SetUser reports that this node now holds n live connections of uid
	// (0: none), away of which are away. A user is away while online with
	// every connection, on every node, away. It must not block on I/O: a
	// networked store batches.
	SetUser(uid string, n, away int)
	// SetMember reports that n of this node's live connections of uid have
	// joined channel (0: none), and whether every connection of uid on this
	// node is away: a channel learns which members are away from its own
	// records, without asking the user's. It must not block on I/O.
	SetMember(channel, uid string, n int, away bool)

	// Status returns what is known of uid on all nodes: its live
	// connections, whether it is away and, if the store keeps them, when
	// it last went offline.
	Status(ctx context.Context, uid string) (UserStatus, error)
	// Users returns how many users are online on all nodes and up to limit
	// of their IDs in ascending order (limit <= 0: none).
	Users(ctx context.Context, limit int) (count int, users []string, err error)
	// Members returns how many members channel has on all nodes and up to
	// limit of their IDs greater than after, in ascending order: a page of
	// a listing that goes on from after ("": from the first).
	Members(ctx context.Context, channel, after string, limit int) (count int, members []string, err error)
}

// A Router delivers to the Relay the topics its node follows: the Store's
// edges of those users and channels, and the Messages published to them.
// The calls for one topic never overlap and alternate, Follow first.
type Router interface {
	// Follow starts delivering topics to the Relay and returns once the
	// Relay has each topic's current state, or when ctx is done: the
	// following holds either way and the state arrives when it can. A
	// router that delivers everything returns at once.
	Follow(ctx context.Context, topics []Topic) error
	// Unfollow stops delivering topics nobody on this node follows any more.
	Unfollow(topics []Topic)
	// Publish delivers m to the Relays of the nodes that follow its topic,
	// this one included.
	Publish(ctx context.Context, m Message) error
}

// A HealthChecker is an Engine that can lose what it shares presence
// through, such as Redis. Health reports whether it can reach it now; a
// Hub's readiness check asks. An Engine that is not one is always healthy.
type HealthChecker interface {
	Health(ctx context.Context) error
}

// A Withdrawer is an Engine whose records outlive the process, such as one
// shared through Redis, and whose edges may come after the change that made
// them, as it writes in the background. Withdraw drops every record this
// node holds and hands the Relay the edges that makes, and those of the
// changes not yet written, before it returns; after it the engine makes no
// edge. Node.Withdraw calls it once the node's connections are gone, while
// its callbacks still run, so that its users' last edges reach them: an
// engine released after the Node closed would make them for nobody to hear.
type Withdrawer interface {
	Withdraw(ctx context.Context) error
}

// A Relay receives what an Engine delivers. Each edge comes once, in the
// order it happened for its user (or user and channel): a user goes online
// when its first connection on any node appears and offline when its last
// one is gone; it joins a channel when its first connection in the channel
// joins it and leaves when its last one there leaves or closes. An engine
// that routes delivers only the topics its node follows. Relay methods never
// block on I/O and never call the Engine; an engine calls them holding none
// of its own locks, in the order of each topic's edges.
//
// Activity edges come the same way: a user turns away while online when its
// last active connection turns away, and active again when one is active; a
// member of a channel, when every connection of the user on every node that
// holds the membership says so. An online user who arrives away gets its
// online edge, then its away edge; a user who goes offline away gets no
// active edge.
type Relay interface {
	// UserChanged reports a user's online or offline edge, made at at: an
	// offline edge's time is the user's last seen. at is zero where the
	// time is not known (a snapshot's state, a topic dropped).
	UserChanged(uid string, online bool, at time.Time)
	// ActivityChanged reports an online user's away or active edge.
	ActivityChanged(uid string, away bool)
	// Produced reports an edge that this node's change (or its claim of a
	// dead node's records) produced: each edge reaches Produced on exactly
	// one node.
	Produced(e Edge)
	MemberChanged(channel, uid string, joined bool)
	// MemberActivity reports a member's away or active edge in channel.
	MemberActivity(channel, uid string, away bool)
	// SetMembers replaces what the Relay knows of channel's members, and of
	// which of them are away, with a snapshot (when the node starts
	// following the channel, or catches up after losing what it shares
	// presence through); the differences count as edges.
	SetMembers(channel string, members, away []string)
	Deliver(m Message)
}

// UserStatus is what Engine.Status knows of a user.
type UserStatus struct {
	Conns    int       // live connections on all nodes
	Away     bool      // online with every connection away
	LastSeen time.Time // when it last went offline; zero: not known
}

// An EdgeKind says what an Edge changed.
type EdgeKind uint8

// The kinds of edges.
const (
	EdgeOnline EdgeKind = iota + 1
	EdgeOffline
	EdgeJoin
	EdgeLeave
	EdgeAway
	EdgeActive
)

var edgeNames = [...]string{EdgeOnline: "online", EdgeOffline: "offline", EdgeJoin: "join", EdgeLeave: "leave", EdgeAway: "away", EdgeActive: "active"}

// String returns the kind's name on the wire: "online", "join", "away", ...
func (k EdgeKind) String() string {
	if int(k) < len(edgeNames) && edgeNames[k] != "" {
		return edgeNames[k]
	}
	return "unknown"
}

// An Edge is one change of presence, as it happened: a user going online or
// offline, away or active, or joining or leaving a channel.
type Edge struct {
	Kind    EdgeKind
	UID     string
	Channel string    // EdgeJoin and EdgeLeave only
	At      time.Time // when it happened
}

// A Topic is one channel or one user (exactly one field is set) that an
// Engine delivers to the nodes that follow it.
type Topic struct {
	Channel string
	UID     string
}

// A Message is for the connections of one user (UID) or for the members of
// one channel (Channel); exactly one of the two is set. Its Kind says what
// it carries.
type Message struct {
	Kind    MessageKind
	Channel string
	UID     string
	Frame   protocol.Encoded // MessageFrame and MessageChat
	From    string           // MessageChat and MessageTyping: the user who sent it
}

// A MessageKind says what a Message carries.
type MessageKind uint8

// The kinds of messages.
const (
	// MessageFrame carries a frame, encoded once, for the topic's
	// connections.
	MessageFrame MessageKind = iota
	// MessageChat carries a chat line From sent in Channel: a frame for its
	// members that also ends From's typing there.
	MessageChat
	// MessageTyping says that From is typing in Channel; it has no frame.
	MessageTyping
	// MessageDisconnect ends every connection of UID; it has no frame.
	MessageDisconnect
)
