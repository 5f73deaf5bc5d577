package presence

import (
	"time"

	"github.com/presenced/presenced/protocol"
)

// A Relay receives what an Engine delivers, as one ordered stream of
// Events: the mirror of Store.Apply. An engine that routes delivers only the
// topics its node follows. Receive never blocks on I/O and never calls the
// Engine; an engine calls it holding none of its own locks.
//
// The order, per topic (a user, or a user in a channel), is the order things
// happened there:
//   - a user goes online when its first connection on any node appears and
//     offline when its last one is gone; it joins a channel when its first
//     connection in the channel joins it and leaves when its last one there
//     leaves or closes; each such edge comes once;
//   - a user turns away while online when its last active connection turns
//     away, and active again when one is active; a member of a channel, when
//     every connection of the user on every node that holds the membership
//     says so. An online user who arrives away gets its online edge, then
//     its away edge; a user who goes offline away gets no active edge;
//   - a user's EventRecord comes before its online edge when it has a
//     record, and before a snapshot (EventMembers, or a followed user's
//     state) for each of its users that has one; a Relay may forget the
//     record of a user that went offline;
//   - EventProduced and EventMessage keep the order they were made in for
//     their topic, as the other events do.
type Relay interface {
	Receive(e Event)
}

// An EventKind says what an Event reports.
type EventKind uint8

// The kinds of events.
const (
	// EventUser: UID went online (On) or offline at At. An offline
	// event's At is the user's last seen; At is zero where the time is not
	// known (a snapshot's state, a topic dropped).
	EventUser EventKind = iota + 1
	// EventActivity: UID, online, turned away (On) or active; in Channel
	// as its member if Channel is set.
	EventActivity
	// EventMember: UID joined (On) or left Channel.
	EventMember
	// EventRecord: Record is UID's whole record after a change made at At
	// (zero: the record as it stands, sent before a snapshot or an online
	// edge).
	EventRecord
	// EventMembers replaces what the Relay knows of Channel's members, and
	// of which of them are away, with a snapshot (when the node starts
	// following the channel, or catches up after losing what it shares
	// presence through); the differences count as edges.
	EventMembers
	// EventProduced: Edge is an edge that this node's change (or its claim
	// of a dead node's records) produced. Each edge is produced on exactly
	// one node, or, where the engine keeps edges until they are delivered
	// (cluster.Config.Outbox), on a node that claims that one too, under
	// the same Edge.ID.
	EventProduced
	// EventMessage: Message is for the connections of its topic.
	EventMessage
)

// An Event is one thing an Engine tells its Relay: its Kind says which of
// the other fields it carries.
type Event struct {
	Kind    EventKind
	UID     string
	Channel string
	On      bool            // EventUser: online; EventMember: joined; EventActivity: away
	At      time.Time       // EventUser, EventRecord
	Record  protocol.Record // EventRecord
	Members []string        // EventMembers
	Away    []string        // EventMembers: those of Members who are away
	Edge    Edge            // EventProduced
	Message Message         // EventMessage
}
