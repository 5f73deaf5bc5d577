// Package lockorder names the server's locks in the one order they may be
// taken, and checks that order in tests.
//
// A goroutine that holds a lock may take only locks that come after it in
// the list below. The list is the whole server's, across packages, so a
// call from one package into another that takes a lock is checked too:
//
//	Hub        transport: the sockets' bookkeeping (Hub.mu)
//	Poller     transport: the epoll set's registrations
//	Node       presence: users, connections and the clock (Node.mu)
//	View       presence: what this node's clients know (the Relay)
//	Notify     presence: the edges waiting for the embedder's callbacks
//	LastSeen   presence: when each user went offline or turned invisible
//	Conn       transport: one connection's write state and inbox turn
//	Workers    transport: the worker pool's idle workers and its queue
//	Router     cluster: the topics this node follows
//	Writer     cluster: the changes not yet written to Redis
//	Publisher  cluster: the messages not yet published
//	Health     cluster: whether Redis answers
//	Store      presence: the in-memory engine's records
//	Queue      internal/queue: a queue's items (a leaf)
//
// Two rules that the list does not show, checked where they are written:
// no lock is held while calling out to an Engine, a Relay's caller holds
// none of the engine's locks, and no lock at all is held while a hook of the
// embedder (OnPresence, OnMessage, ...) runs.
//
// Built without the lockorder tag, a Mutex is a sync.Mutex and checks
// nothing. Built with it (go test -tags lockorder), taking a lock out of
// order panics with both locks' names.
package lockorder

import "sync"

// A Rank is a lock's place in the order. Its type parameter is one of the
// types below, which cost nothing in a Mutex.
type Rank interface {
	rank() (int, string)
}

// The locks, in order.
type (
	Hub       struct{}
	Poller    struct{}
	Node      struct{}
	View      struct{}
	Notify    struct{}
	LastSeen  struct{}
	Conn      struct{}
	Workers   struct{}
	Router    struct{}
	Writer    struct{}
	Publisher struct{}
	Health    struct{}
	Store     struct{}
	Queue     struct{}
)

func (Hub) rank() (int, string)       { return 1, "Hub" }
func (Poller) rank() (int, string)    { return 2, "Poller" }
func (Node) rank() (int, string)      { return 3, "Node" }
func (View) rank() (int, string)      { return 4, "View" }
func (Notify) rank() (int, string)    { return 5, "Notify" }
func (LastSeen) rank() (int, string)  { return 6, "LastSeen" }
func (Conn) rank() (int, string)      { return 7, "Conn" }
func (Workers) rank() (int, string)   { return 8, "Workers" }
func (Router) rank() (int, string)    { return 9, "Router" }
func (Writer) rank() (int, string)    { return 10, "Writer" }
func (Publisher) rank() (int, string) { return 11, "Publisher" }
func (Health) rank() (int, string)    { return 12, "Health" }
func (Store) rank() (int, string)     { return 13, "Store" }
func (Queue) rank() (int, string)     { return 14, "Queue" }

// A Mutex is a sync.Mutex of rank R. Its zero value is unlocked.
type Mutex[R Rank] struct {
	mu sync.Mutex
}

// Lock locks m; with the lockorder tag, it panics if the goroutine holds a
// lock that comes after R, or one of rank R.
func (m *Mutex[R]) Lock() {
	if Enabled {
		var r R
		acquire(r.rank())
	}
	m.mu.Lock()
}

// Unlock unlocks m.
func (m *Mutex[R]) Unlock() {
	if Enabled {
		var r R
		release(r.rank())
	}
	m.mu.Unlock()
}
