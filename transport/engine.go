package transport

import "context"

// Engine keeps presence for every node that serves the same users. The Hub
// reports the connections it holds itself; the Engine decides when a user is
// online or offline and hands those edges, and published messages, back to
// every node's Hub through a Relay.
//
// The in-memory engine (NewMemoryEngine) serves a single process;
// cluster.Engine shares presence between processes through Redis. Both are
// safe for concurrent use.
type Engine interface {
	// SetLocal reports that this node now holds n live connections for uid
	// (n == 0: none). The Hub calls it on every change of n, in order for a
	// given uid. It must not block on I/O: a networked engine batches.
	SetLocal(uid string, n int)

	// Lookup returns the number of live connections of uid across all nodes.
	Lookup(ctx context.Context, uid string) (conns int, err error)

	// Users returns how many users are online across all nodes and up to
	// limit of their IDs in ascending order (limit <= 0: none).
	Users(ctx context.Context, limit int) (count int, users []string, err error)

	// Publish delivers msg, a complete JSON frame, to the clients of every
	// node, this one included.
	Publish(ctx context.Context, msg []byte) error

	// Run delivers presence edges and published messages to r, in the order
	// they happened, until ctx is done. The Hub calls it once.
	Run(ctx context.Context, r Relay) error

	// Health reports whether the engine can reach what it shares presence
	// through; nil for the in-memory engine.
	Health(ctx context.Context) error
}

// Relay receives what an Engine delivers to this node's clients.
type Relay interface {
	// PresenceChanged is called once per edge: online when the user's first
	// connection on any node appears, offline when the last one is gone.
	PresenceChanged(uid string, online bool)
	// Broadcast sends msg to every connection on this node.
	Broadcast(msg []byte)
}
