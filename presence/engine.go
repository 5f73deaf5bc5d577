package presence

import (
	"context"
	"encoding/json"
	"time"

	"github.com/presenced/presenced/protocol"
)

// An Engine keeps presence where every node can see it: a Store of who is
// online and who is in which channel, and a Router that delivers the
// Store's edges and the Messages of the topics a node follows to its Relay.
// NewMemoryEngine keeps both in this process; package cluster shares them
// through Redis. An engine that can lose what it shares presence through
// also has a Health(ctx) error method, which Node.Health asks.
//
// A Node calls Attach once, from New, before any other method, and Run
// until it closes (again, after a pause, if Run fails). It counts its
// topics' followers itself and calls Follow on a topic's first, Unfollow
// after its last; the calls for one topic never overlap and alternate.
type Engine interface {
	Store
	Router
	Attach(r Relay)
	Run(ctx context.Context) error
}

// A Store counts users and members over the connections each node holds,
// and keeps users' records. A user is away while online with every
// connection, on every node, away; a channel knows its away members from
// its own records.
type Store interface {
	// Apply takes one change this node made to what it holds. The Node
	// calls it one change at a time, in the order the changes were made,
	// holding no lock: a user's record changes and its count changes come
	// in one stream, so an engine that keeps the stream's order in what it
	// writes and delivers shows them in the order they were made. It must
	// not block on I/O (a networked store batches).
	Apply(c Change)
	// Status is uid on all nodes; LastSeen if the store keeps it.
	Status(ctx context.Context, uid string) (UserStatus, error)
	// Users counts the users online and lists up to limit, in order.
	Users(ctx context.Context, limit int) (count int, users []string, err error)
	// Members counts channel's members and lists up to limit of those
	// after after ("": from the first), in order.
	Members(ctx context.Context, channel, after string, limit int) (count int, members []string, err error)
	// Records returns the records of those of uids that have one.
	Records(ctx context.Context, uids []string) (map[string]protocol.Record, error)
	// Hidden lists in order the invisible users online (channel "") or the
	// invisible members of channel.
	Hidden(ctx context.Context, channel string) ([]string, error)
}

// A ChangeKind says what a Change changed.
type ChangeKind uint8

// The kinds of changes. A user's record (info, mode, note) lives while the
// user is online and for Config.LastSeenTTL after; its changes reach the
// Relay as EventRecord, and are produced as EdgeUpdate once cluster-wide.
const (
	// ChangeUser: this node holds N live connections of UID, Away of them
	// away.
	ChangeUser ChangeKind = iota + 1
	// ChangeMember: N of them joined Channel; Away is 1 if all of the
	// node's connections of UID are away, else 0.
	ChangeMember
	// ChangeInfo: Info (a JSON object, checked) is UID's info now, that
	// of its newest connection that brought one.
	ChangeInfo
	// ChangeSet applies a client's Set to UID's record; the last set wins
	// across nodes. A set that changes nothing makes no edge.
	ChangeSet
	// ChangeExpireNote clears UID's note if it is still the note that runs
	// out at Until, and Until has passed. Of the changes every node makes
	// for one note, at most one clears it.
	ChangeExpireNote
	// ChangeForget says the node's last seen of UID ran out, LastSeenTTL
	// after UID went offline: what an engine keeps of an offline user for
	// as long (a record, or a copy of one) may go now. It changes nothing
	// shared; an engine that keeps nothing so ignores it.
	ChangeForget
)

// A Change is one change a node made, for Store.Apply: its Kind says which
// of the other fields it carries.
type Change struct {
	Kind    ChangeKind
	UID     string
	Channel string          // ChangeMember
	N, Away int             // ChangeUser, ChangeMember
	Info    json.RawMessage // ChangeInfo
	Set     protocol.Set    // ChangeSet
	Until   int64           // ChangeExpireNote
}

// A Router delivers what happens to the topics its node follows.
type Router interface {
	// Follow returns once the Relay has each topic's state, or when ctx is
	// done (the state then comes when it can).
	Follow(ctx context.Context, topics []Topic) error
	Unfollow(topics []Topic)
	// Publish delivers m to every node that follows its topic, this one too.
	Publish(ctx context.Context, m Message) error
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

// UserStatus is what Engine.Status knows of a user.
type UserStatus struct {
	Conns    int       // live connections on all nodes
	Away     bool      // online with every connection away
	LastSeen time.Time // when it last went offline; zero: not known
	Record   protocol.Record
	// HiddenAt is when the user turned invisible, while it is: what other
	// clients have as its last seen.
	HiddenAt time.Time
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
	EdgeUpdate // a user's record changed
)

var edgeNames = [...]string{EdgeOnline: "online", EdgeOffline: "offline", EdgeJoin: "join", EdgeLeave: "leave", EdgeAway: "away", EdgeActive: "active", EdgeUpdate: "update"}

// String returns the kind's name on the wire: "online", "join", "away", ...
func (k EdgeKind) String() string {
	if int(k) < len(edgeNames) && edgeNames[k] != "" {
		return edgeNames[k]
	}
	return "unknown"
}

// An Edge is one change of presence, as it happened: a user going online or
// offline, away or active, joining or leaving a channel, or changing its
// record.
type Edge struct {
	Kind    EdgeKind
	UID     string
	Channel string          // EdgeJoin and EdgeLeave only
	Record  protocol.Record // EdgeUpdate only: the whole new record
	At      time.Time       // when it happened
	// ID names the edge cluster-wide: its place in the engine's log of
	// edges (EdgeLog), the same on every delivery and in a replay; empty
	// from an engine that keeps no log.
	ID string
}

// A Topic is one channel or one user (exactly one field is set) that an
// Engine delivers to the nodes that follow it.
type Topic struct {
	Channel string
	UID     string
}

// A Message is for the connections of one user (UID) or the members of one
// channel (Channel): a frame, encoded once (MessageFrame, MessageChat), or
// news of the user From (MessageChat, MessageTyping) or to UID
// (MessageDisconnect).
type Message struct {
	Kind    MessageKind
	Channel string
	UID     string
	Frame   protocol.Encoded
	From    string
	// Reply is where the answer to a MessageForward goes, as its engine
	// wrote it: see Forwarder.
	Reply string
}

// A MessageKind says what a Message carries.
type MessageKind uint8

// The kinds of messages.
const (
	MessageFrame      MessageKind = iota // a frame for the topic's connections
	MessageChat                          // a line From said in Channel: it ends From's typing there
	MessageTyping                        // From types in Channel; no frame
	MessageDisconnect                    // ends every connection of UID; no frame
	MessageForward                       // a request from another node (Forwarder), in Frame.Data; no topic
)
