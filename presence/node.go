package presence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/queue"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/tracker"
)

// Defaults used when a Config field is zero.
const (
	DefaultMemberList    = 100
	DefaultPresenceLists = 1000
	DefaultMaxChannels   = 100
)

// A Client is one connection as the Node sees it. A Client is compared by
// ==, so use a pointer.
type Client interface {
	// Send queues a frame for the connection. It must not block or call the
	// Node: the Node calls it under its locks, so that a snapshot and the
	// diffs after it reach the connection in order.
	Send(f protocol.Encoded)
	// Probe asks a connection silent for half the timeout for a sign of
	// life, such as a WebSocket ping.
	Probe()
	// Close starts closing the connection with a close code and reason
	// (protocol.CloseIdleTimeout, CloseTokenExpired, CloseDisconnected) and
	// has it Disconnect from the Node. The Node calls it holding no lock.
	Close(code int, reason string)
}

// Config configures a Node. The zero value works: a 30 s timeout (31 slots
// of 1 s), in-memory presence, no grace period.
type Config struct {
	// Engine stores presence; nil means NewMemoryEngine().
	Engine Engine

	// Slots and Tick shape every ring of the Node: a connection silent for
	// (Slots-1)*Tick times out, and a heartbeat lease lasts as long. 0 means
	// 31 and 1 s.
	Slots int
	Tick  time.Duration

	// Grace delays a user's offline, and its leaving the channels its last
	// connection had joined, after that connection is gone. It is rounded up
	// to whole ticks; 0 is none.
	Grace time.Duration

	MemberList    int // most member IDs in a joined snapshot; 0 means 100
	PresenceLists int // above this many members a channel's diffs carry the count only; 0 means 1,000
	MaxWatch      int // most user IDs in one watch list; 0 means 1,000
	MaxChannels   int // most channels one connection may join; 0 means 100

	// OnPresence, if set, is told of each user's online and offline edges,
	// once per edge across all nodes: on the node whose change (or claim of
	// a dead node) produced it. It runs on a goroutine of its own, one call
	// at a time, in the order of the edges.
	OnPresence func(uid string, online bool)
	// OnActivity, if set, is told of each user's away and active edges, the
	// same way as OnPresence, on the same goroutine.
	OnActivity func(uid string, away bool)
	// OnEdges, if set, is given the edges this node produced (the same as
	// OnPresence and OnActivity, and each channel's join and leave) once per
	// tick that has any, in the order they happened, on the same goroutine:
	// for webhooks.
	OnEdges func(edges []Edge)

	// AwayAfter marks a connection away after it sent no activity, chat,
	// typing or join frame for that long; 0 never does. A client may also
	// say it is away itself (SetActivity).
	AwayAfter time.Duration

	// LastSeenTTL is how long the Node keeps when a user went offline, for
	// Status; 0 means DefaultLastSeenTTL (24 hours).
	LastSeenTTL time.Duration

	// TypingTTL is how long a user stays typing in a channel after its last
	// typing frame there (Typing); 0 means DefaultTypingTTL (5 seconds).
	// Typing ends between TypingTTL and TypingTTL plus one Tick after it.
	TypingTTL time.Duration

	// OnStep, if set, is called after every step of the clock, once the
	// step's timeouts are handled and its changes sent, with how long the
	// step took. It runs on the clock's callback goroutine.
	OnStep func(took time.Duration)

	Logger *slog.Logger // nil: silent
}

// Errors a Node returns for what a client asked; their text is meant for the
// client's developer.
var (
	ErrNotJoined       = errors.New("not a member of the channel: join it first")
	ErrTooManyChannels = errors.New("too many channels on one connection")
	ErrTooManyWatched  = errors.New("watch list too long")
	ErrUnknownClient   = errors.New("connection closed")
	ErrClosing         = errors.New("shutting down")
)

// Node keeps the presence of one server process's connections. Create one
// with New, step its clock with Run (or Step), and release it with Close.
// All methods are safe for concurrent use.
type Node struct {
	engine      Engine
	log         *slog.Logger
	grace       time.Duration
	tick        time.Duration
	maxWatch    int
	maxChannels int
	onStep      func(time.Duration)
	awayAfter   time.Duration

	// The clock. ring is stepped by Run and steps the others from its
	// OnStep, so every deadline moves on one cursor; they are trackers
	// without callbacks of their own, read by Advance.
	ring   *tracker.Tracker[Client] // connections: a keepalive is a Touch
	leases *tracker.Tracker[string] // HTTP-heartbeat leases, by user
	graces *tracker.Tracker[string] // grace periods, by user
	expiry *tracker.Tracker[Client] // sessions, due when their token expires
	idle   *tracker.Tracker[Client] // active connections, due AwayAfter after their last activity
	// stalled says when the clock last stalled: ring.Stalled.
	stalled func() time.Time

	// Lock order (the whole server's is package lockorder's): mu, then the
	// view's v.mu, then a connection's; out's own lock is a leaf, taken
	// under mu. The Node holds neither mu nor v.mu while it calls the Engine
	// or a Client's Close or Probe. Client.Send is the one call out under
	// them (v.mu, and mu for a snapshot): it only queues, and holding them
	// keeps a snapshot and the diffs after it in order. The Engine calls the
	// view (its Relay) holding no lock of its own.
	mu        lockorder.Mutex[lockorder.Node]
	conns     map[Client]*connState
	users     map[string]*userState
	infos     map[string][]connInfo // the users some of whose connections brought info
	connsPeak int
	usersPeak int
	infosPeak int
	refs      followers // followed topics, counted
	// out holds the changes for the Engine, in the order they were made:
	// pushed under mu, applied after it (sendOps), so the Node calls the
	// Engine without holding its lock.
	out     queue.Queue[Change]
	closing bool

	v view
}

// New returns a Node for cfg, or an error if cfg is invalid. It hands the
// Engine its Relay; nothing steps until Run or Step.
func New(cfg Config) (*Node, error) {
	if cfg.Grace < 0 || cfg.MemberList < 0 || cfg.PresenceLists < 0 || cfg.MaxWatch < 0 || cfg.MaxChannels < 0 || cfg.LastSeenTTL < 0 || cfg.AwayAfter < 0 || cfg.TypingTTL < 0 {
		return nil, errors.New("presence: Config: Grace, MemberList, PresenceLists, MaxWatch, MaxChannels, LastSeenTTL, AwayAfter and TypingTTL must not be negative")
	}
	n := &Node{
		engine:      cfg.Engine,
		log:         cfg.Logger,
		grace:       cfg.Grace,
		maxWatch:    cmp.Or(cfg.MaxWatch, protocol.MaxWatch),
		maxChannels: cmp.Or(cfg.MaxChannels, DefaultMaxChannels),
		onStep:      cfg.OnStep,
		awayAfter:   cfg.AwayAfter,
		conns:       make(map[Client]*connState),
		users:       make(map[string]*userState),
		infos:       make(map[string][]connInfo),
		refs: followers{
			byChannel: make(map[string]int),
			byUser:    make(map[string]int),
			calls:     make(map[Topic]chan struct{}),
		},
	}
	if err := n.makeClock(cfg.Slots, cfg.Tick, cmp.Or(cfg.LastSeenTTL, DefaultLastSeenTTL), cmp.Or(cfg.TypingTTL, DefaultTypingTTL)); err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	if n.engine == nil {
		n.engine = NewMemoryEngine()
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.v.init(cmp.Or(cfg.MemberList, DefaultMemberList), cmp.Or(cfg.PresenceLists, DefaultPresenceLists))
	n.v.notify.onPresence = cfg.OnPresence
	n.v.notify.onActivity = cfg.OnActivity
	n.v.notify.onEdges = cfg.OnEdges
	n.engine.Attach(&n.v)
	return n, nil
}

// lastSeen returns when uid last went offline (its last connection closed or
// timed out), if this node heard of that within Config.LastSeenTTL. With
// the in-memory engine it hears of every edge.
func (n *Node) lastSeen(uid string) (t time.Time, ok bool) {
	return n.v.book.get(uid).lastSeen()
}

// Status returns what is known of uid on every node: its live connections,
// whether it is away, while it is offline when it went offline, and while
// it is invisible since when, from the Engine's records or else this
// node's.
func (n *Node) Status(ctx context.Context, uid string) (UserStatus, error) {
	st, err := n.engine.Status(ctx, uid)
	if err != nil {
		return UserStatus{}, err
	}
	t := n.v.book.get(uid)
	if st.Conns > 0 {
		st.LastSeen = time.Time{}
	} else if st.LastSeen.IsZero() {
		st.LastSeen, _ = t.lastSeen()
	}
	if st.Record.Mode == protocol.ModeInvisible && st.HiddenAt.IsZero() {
		st.HiddenAt = t.hiddenAt()
	}
	return st, nil
}

// Health reports whether the Node's Engine can reach what it shares
// presence through: nil unless its Health method says otherwise.
func (n *Node) Health(ctx context.Context) error {
	if hc, ok := n.engine.(interface{ Health(context.Context) error }); ok {
		return hc.Health(ctx)
	}
	return nil
}

// Timeout is how long a connection may stay silent, and how long a
// heartbeat lease lasts: (Slots-1)*Tick.
func (n *Node) Timeout() time.Duration { return n.ring.Timeout() }

// Tick is the step of the Node's clock.
func (n *Node) Tick() time.Duration { return n.ring.Tick() }

// Ring returns a view of the connections' ring: its cursor and how many
// connections are due in each slot. It costs O(connections).
func (n *Node) Ring() tracker.Ring { return n.ring.Ring() }

// Run steps the Node's clock from the wall clock and runs the Engine's
// background work, until ctx is done. An Engine that fails is restarted
// with a capped backoff.
func (n *Node) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { n.runEngine(ctx) })
	n.ring.Run(ctx)
	wg.Wait()
}

func (n *Node) runEngine(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		err := n.engine.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		n.log.Error("presence: engine stopped; restarting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Step steps the clock once by hand and waits until the step's timeouts
// are handled and its changes sent: for a caller that drives the clock
// itself instead of calling Run. It must not be called from a Client's
// Close or Probe, which it would wait for.
func (n *Node) Step() {
	n.ring.Advance()
	n.ring.Settle()
}

// Shutdown ends every lease and grace period now, so this node's users that
// have no live connection go offline, and refuses new connections and
// heartbeats. Connections still live leave as they are disconnected, with
// no grace period.
func (n *Node) Shutdown() {
	n.mu.Lock()
	n.closing = true
	for uid, u := range n.users {
		if u.lease() != nil {
			n.leases.Remove(uid)
			n.endLeaseLocked(u)
		}
		if u.inGrace() {
			n.endGraceLocked(uid, u)
			n.forgetLocked(uid, u)
		}
	}
	n.mu.Unlock()
	n.sendOps()
}

// Withdraw hands the Engine every change made so far and, if it is a
// Withdrawer, has it drop this node's records, so the edges of this node's
// users going offline and leaving their channels reach OnPresence,
// OnActivity and OnEdges before Close. Call it after Shutdown, once every
// connection is disconnected, and before Close; a Hub that made its Node
// does. It returns the Engine's error, ctx's if ctx ends first: the records
// left then go with their edges on the node that claims them.
func (n *Node) Withdraw(ctx context.Context) error {
	n.sendOps()
	if w, ok := n.engine.(Withdrawer); ok {
		return w.Withdraw(ctx)
	}
	return nil
}

// Close stops the clock and waits for pending OnPresence, OnActivity and
// OnEdges calls; edges that come later are dropped. Call it after Shutdown,
// Run and Withdraw, once every connection is disconnected.
func (n *Node) Close() {
	n.ring.Close()
	n.leases.Close()
	n.graces.Close()
	n.expiry.Close()
	n.idle.Close()
	n.v.typing.ring.Close()
	n.v.notes.ring.Close()
	n.v.notify.close()
}

// LocalUsers is how many users this node holds a connection, lease or grace
// period of.
func (n *Node) LocalUsers() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.users)
}

// Users returns how many users are online on every node and up to limit of
// their IDs in ascending order.
func (n *Node) Users(ctx context.Context, limit int) (int, []string, error) {
	return n.engine.Users(ctx, limit)
}
