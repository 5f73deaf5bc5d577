// Package presence keeps who is online and who is in which channel, counted
// over connections, and turns its changes into the frames clients asked for.
//
// A Node is one server process's side of it. Its connections are Clients of
// any kind (the transport package's WebSockets); a user is online while at
// least one of its connections, or an HTTP-heartbeat lease, is live, and a
// member of a channel while one of them has joined it. A grace period may
// hold a user's presence for a while after its last connection went, so a
// page reload does not flap. The counts go to an Engine, which tells the
// nodes' Relays about the edges: in memory for one node; through Redis for
// several, where an Engine that is a Router tells each node only of the
// channels and users its connections follow.
//
// Clients hear only what they asked for: a connection that joined a channel
// gets a snapshot, then at most one diff per tick with the channel's joins
// and leaves netted over the tick (a user who leaves and comes back within it
// appears in neither list); one that watches users gets at most one status
// frame per tick. A snapshot and the diffs after it never miss or repeat an
// edge. Above Config.PresenceLists members a channel's diffs carry its count
// only.
//
// Lock order: Node.mu, then the Engine's own lock (an engine may call its
// Relay from SetUser and SetMember), then the view's lock, then a Client's.
// Nothing is called in the other direction: Client.Send must not block or
// call back into the Node.
package presence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/tracker"
)

// Defaults used when a Config field is zero.
const (
	DefaultMemberList    = 100
	DefaultPresenceLists = 1000
	DefaultMaxWatch      = 1000
	DefaultMaxChannels   = 100
)

// A Client is one connection as the Node sees it. Send queues a complete
// JSON text frame for it; Disconnect starts ending it at the server's
// request. Neither may block or call the Node: the Node calls them under its
// locks. A Client is compared by ==, so use a pointer.
type Client interface {
	Send(frame []byte)
	Disconnect()
}

// Config configures a Node. The zero value works: a 30 s lease (31 slots of
// 1 s), in-memory presence, no grace period.
type Config struct {
	// Engine keeps presence; nil means NewMemoryEngine(). The Node calls its
	// Run from Run.
	Engine Engine

	// Slots and Tick time heartbeat leases and grace periods, like the
	// connections' own ring: a lease lasts (Slots-1)*Tick. 0 means 31 and
	// 1 s. Tick is how often the owner calls Node.Tick.
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

	// Stalled, if set, says when the clock that calls Tick last stalled (the
	// process was stopped or starved) and caught up, as tracker.Stalled
	// does. A lease or grace period that ends within a timeout of a stall
	// gets two more ticks, once per stall: the heartbeats and reconnections
	// sent meanwhile may still wait unread.
	Stalled func() time.Time

	// OnPresence, if set, is told of each user's online and offline edges,
	// once per edge across all nodes: on the node whose change (or claim of
	// a dead node) produced it. It runs on a goroutine of its own, one call
	// at a time, in the order of the edges.
	OnPresence func(uid string, online bool)

	Logger *slog.Logger // nil: silent
}

// Errors a Node returns for what a client asked; their text is meant for the
// client's developer.
var (
	ErrInvalidChannel  = errors.New("invalid channel name: 1 to 128 letters, digits or _.-:@/#")
	ErrNotJoined       = errors.New("not a member of the channel: join it first")
	ErrTooManyChannels = errors.New("too many channels on one connection")
	ErrTooManyWatched  = errors.New("watch list too long")
	ErrUnknownClient   = errors.New("connection closed")
	ErrClosing         = errors.New("shutting down")
)

// Node keeps the presence of one server process's connections. Create one
// with New; all methods are safe for concurrent use.
type Node struct {
	engine      Engine
	router      Router // engine, if it is a Router
	log         *slog.Logger
	grace       time.Duration
	tick        time.Duration
	stalled     func() time.Time
	maxWatch    int
	maxChannels int

	mu        sync.Mutex
	conns     map[Client]*connState
	users     map[string]*userState
	connsPeak int
	usersPeak int
	leases    *tracker.Tracker[string] // HTTP-heartbeat leases, by user
	graces    *tracker.Tracker[string] // grace periods, by user
	closing   bool

	v view
}

// connState is a live connection: a Client, or a user's lease.
type connState struct {
	uid      string
	channels []string
}

// userState counts one user's live connections on this node. During a grace
// period conns is 0 and held lists the channels the last one had joined;
// engine counts include the grace period as one connection.
type userState struct {
	conns     int            // live Clients, plus one for a lease
	chans     map[string]int // channel -> live connections that joined it
	lease     *connState
	inGrace   bool
	held      []string
	reprieved int64 // the stall (UnixNano) after which its lease or grace was put off
}

func (u *userState) count() int {
	if u.inGrace {
		return u.conns + 1
	}
	return u.conns
}

func (u *userState) memberCount(channel string) int {
	n := u.chans[channel]
	if u.inGrace && slices.Contains(u.held, channel) {
		n++
	}
	return n
}

// New returns a Node for cfg, or an error if cfg is invalid.
func New(cfg Config) (*Node, error) {
	if cfg.Grace < 0 || cfg.MemberList < 0 || cfg.PresenceLists < 0 || cfg.MaxWatch < 0 || cfg.MaxChannels < 0 {
		return nil, errors.New("presence: Config: Grace, MemberList, PresenceLists, MaxWatch and MaxChannels must not be negative")
	}
	ring := tracker.Config[string]{Slots: cfg.Slots, Tick: cfg.Tick}
	leases, err := tracker.New(ring)
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	graces, err := tracker.New(ring)
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	n := &Node{
		engine:      cfg.Engine,
		log:         cfg.Logger,
		grace:       cfg.Grace,
		tick:        cmp.Or(cfg.Tick, tracker.DefaultTick),
		stalled:     cfg.Stalled,
		maxWatch:    orDefault(cfg.MaxWatch, DefaultMaxWatch),
		maxChannels: orDefault(cfg.MaxChannels, DefaultMaxChannels),
		conns:       make(map[Client]*connState),
		users:       make(map[string]*userState),
		leases:      leases,
		graces:      graces,
	}
	if n.engine == nil {
		n.engine = NewMemoryEngine()
	}
	n.router, _ = n.engine.(Router)
	n.v.init(orDefault(cfg.MemberList, DefaultMemberList), orDefault(cfg.PresenceLists, DefaultPresenceLists))
	n.v.notify.fn = cfg.OnPresence
	if m, ok := n.engine.(*memoryEngine); ok {
		m.attach(&n.v)
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	return n, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Engine returns the Engine the Node reports to.
func (n *Node) Engine() Engine { return n.engine }

// Timeout is how long a heartbeat lease lasts.
func (n *Node) Timeout() time.Duration { return n.leases.Timeout() }

// Run runs the Engine's Run until ctx is done, restarting it with a capped
// backoff when a networked engine fails.
func (n *Node) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		err := n.engine.Run(ctx, &n.v)
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

// ValidChannel reports whether name is a channel name: 1 to 128 ASCII
// letters, digits or any of _.-:@/#.
func ValidChannel(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_' || c == '.' || c == '-' || c == ':' || c == '@' || c == '/' || c == '#':
		default:
			return false
		}
	}
	return true
}

// CheckChannels validates a list of channel names for one connection and
// returns it without duplicates, in order.
func (n *Node) CheckChannels(channels []string) ([]string, error) {
	var out []string
	for _, ch := range channels {
		if !ValidChannel(ch) {
			return nil, fmt.Errorf("%w: %q", ErrInvalidChannel, truncate(ch))
		}
		if !slices.Contains(out, ch) {
			out = append(out, ch)
		}
	}
	if len(out) > n.maxChannels {
		return nil, ErrTooManyChannels
	}
	return out, nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// followWait bounds how long a join or watch waits for a Router to deliver
// the current state; past it the state follows as diffs.
const followWait = 5 * time.Second

// follow makes a Router deliver topics before the caller subscribes to them.
func (n *Node) follow(topics []Topic) {
	if n.router == nil || len(topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), followWait)
	defer cancel()
	if err := n.router.Follow(ctx, topics); err != nil {
		n.log.Debug("presence: following without a snapshot yet", "topics", len(topics), "err", err)
	}
}

func (n *Node) unfollow(topics []Topic) {
	if n.router != nil && len(topics) > 0 {
		n.router.Unfollow(topics)
	}
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

// Connect counts c as a live connection of uid and joins it to channels
// (already checked with CheckChannels), sending c a joined snapshot for
// each. The caller sends its own welcome first.
func (n *Node) Connect(c Client, uid string, channels []string) error {
	// The user's own topic carries messages and disconnects meant for it.
	topics := append(userTopics([]string{uid}), channelTopics(channels)...)
	n.follow(topics)
	if err := n.connect(c, uid, channels); err != nil {
		n.unfollow(topics)
		return err
	}
	return nil
}

func (n *Node) connect(c Client, uid string, channels []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return ErrClosing
	}
	if _, dup := n.conns[c]; dup {
		return errors.New("presence: Connect: client already connected")
	}
	cs := &connState{uid: uid}
	n.conns[c] = cs
	n.v.addClient(c, uid)
	u := n.attachLocked(cs)
	for _, ch := range channels {
		n.joinLocked(c, cs, u, ch)
	}
	n.endGraceLocked(cs.uid, u)
	return nil
}

// Disconnect stops counting c: its channels lose it and, if it was its
// user's last connection, the user goes offline (after the grace period).
// Idempotent.
func (n *Node) Disconnect(c Client) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.conns[c]
	if cs == nil {
		return
	}
	delete(n.conns, c)
	n.conns = shrink.Map(n.conns, &n.connsPeak)
	watched := n.v.removeClient(c, cs.uid, cs.channels)
	topics := append(append(userTopics([]string{cs.uid}), channelTopics(cs.channels)...), userTopics(watched)...)
	n.detachLocked(cs)
	n.unfollow(topics)
}

// attachLocked counts cs for its user, creating the user if needed.
func (n *Node) attachLocked(cs *connState) *userState {
	u := n.users[cs.uid]
	if u == nil {
		u = &userState{chans: make(map[string]int)}
		n.users[cs.uid] = u
	}
	u.conns++
	n.engine.SetUser(cs.uid, u.count())
	return u
}

// detachLocked stops counting cs. The last connection of a user starts its
// grace period, which holds the user and cs's channels; without one the
// user leaves them and goes offline now.
func (n *Node) detachLocked(cs *connState) {
	u := n.users[cs.uid]
	u.conns--
	hold := u.conns == 0 && n.grace > 0 && !n.closing
	if hold {
		u.inGrace = true
		u.held = append(u.held, cs.channels...)
		n.graces.TouchFor(cs.uid, n.grace)
	}
	for _, ch := range cs.channels {
		n.leaveCountLocked(cs.uid, u, ch)
	}
	cs.channels = nil
	if !hold {
		n.engine.SetUser(cs.uid, u.count())
		n.forgetLocked(cs.uid, u)
	}
}

func (n *Node) forgetLocked(uid string, u *userState) {
	if u.count() == 0 {
		delete(n.users, uid)
		n.users = shrink.Map(n.users, &n.usersPeak)
	}
}

// endGraceLocked ends u's grace period, if any: the channels it held that
// no live connection has joined are left, and with no connection left the
// user goes offline.
func (n *Node) endGraceLocked(uid string, u *userState) {
	if !u.inGrace {
		return
	}
	n.graces.Remove(uid)
	u.inGrace = false
	held := u.held
	u.held = nil
	for _, ch := range held {
		n.engine.SetMember(ch, uid, u.memberCount(ch))
	}
	n.engine.SetUser(uid, u.count())
}

func (n *Node) joinLocked(c Client, cs *connState, u *userState, channel string) {
	if !slices.Contains(cs.channels, channel) {
		cs.channels = append(cs.channels, channel)
		u.chans[channel]++
		n.engine.SetMember(channel, cs.uid, u.memberCount(channel))
	}
	if c != nil {
		n.v.subscribe(c, channel)
	}
}

func (n *Node) leaveCountLocked(uid string, u *userState, channel string) {
	if u.chans[channel]--; u.chans[channel] <= 0 {
		delete(u.chans, channel)
	}
	n.engine.SetMember(channel, uid, u.memberCount(channel))
}

// Join joins c to channel and sends c a joined snapshot; joining again sends
// the snapshot again.
func (n *Node) Join(c Client, channel string) error {
	if !ValidChannel(channel) {
		return ErrInvalidChannel
	}
	topic := channelTopics([]string{channel})
	n.follow(topic)
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.conns[c]
	if cs == nil {
		n.unfollow(topic)
		return ErrUnknownClient
	}
	joined := slices.Contains(cs.channels, channel)
	if !joined && len(cs.channels) >= n.maxChannels {
		n.unfollow(topic)
		return ErrTooManyChannels
	}
	if joined {
		n.unfollow(topic) // followed once per connection that joined
	}
	n.joinLocked(c, cs, n.users[cs.uid], channel)
	return nil
}

// Leave takes c out of channel and sends it a left frame, also if c had not
// joined it.
func (n *Node) Leave(c Client, channel string) error {
	if !ValidChannel(channel) {
		return ErrInvalidChannel
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.conns[c]
	if cs == nil {
		return ErrUnknownClient
	}
	if i := slices.Index(cs.channels, channel); i >= 0 {
		cs.channels = slices.Delete(cs.channels, i, i+1)
		n.leaveCountLocked(cs.uid, n.users[cs.uid], channel)
		n.unfollow(channelTopics([]string{channel}))
	}
	n.v.unsubscribe(c, channel)
	return nil
}

// Watch replaces c's watch list with uids and sends c a watching frame with
// those of them online now; status frames for them follow at ticks.
func (n *Node) Watch(c Client, uids []string) error {
	uids = slices.Clone(uids)
	slices.Sort(uids)
	uids = slices.Compact(uids)
	if len(uids) > n.maxWatch {
		return fmt.Errorf("%w: at most %d user IDs", ErrTooManyWatched, n.maxWatch)
	}
	n.follow(userTopics(uids))
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns[c] == nil {
		n.unfollow(userTopics(uids))
		return ErrUnknownClient
	}
	n.unfollow(userTopics(n.v.watch(c, uids)))
	return nil
}

// Heartbeat keeps uid online for one lease (Timeout) as a connection of its
// own, a member of channels (checked with CheckChannels): each heartbeat
// states the lease's channels anew.
func (n *Node) Heartbeat(uid string, channels []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return ErrClosing
	}
	u := n.users[uid]
	if u == nil || u.lease == nil {
		cs := &connState{uid: uid}
		u = n.attachLocked(cs)
		u.lease = cs
	}
	cs := u.lease
	for _, ch := range slices.Clone(cs.channels) {
		if !slices.Contains(channels, ch) {
			cs.channels = slices.DeleteFunc(cs.channels, func(s string) bool { return s == ch })
			n.leaveCountLocked(uid, u, ch)
		}
	}
	for _, ch := range channels {
		n.joinLocked(nil, cs, u, ch)
	}
	n.endGraceLocked(uid, u)
	n.leases.Touch(uid)
	return nil
}

// Tick is one step of the clock: leases and grace periods that ran out end,
// and the changes of the tick go out as coalesced diffs and status frames.
// The owner calls it once per Config.Tick.
func (n *Node) Tick() {
	n.mu.Lock()
	stall := n.recentStall()
	for _, uid := range n.leases.Advance() {
		if u := n.users[uid]; u != nil && u.lease != nil {
			if reprieve(u, stall) {
				n.leases.TouchFor(uid, 2*n.tick)
				continue
			}
			cs := u.lease
			u.lease = nil
			n.detachLocked(cs)
		}
	}
	for _, uid := range n.graces.Advance() {
		if u := n.users[uid]; u != nil && u.inGrace {
			if reprieve(u, stall) {
				n.graces.TouchFor(uid, 2*n.tick)
				continue
			}
			n.endGraceLocked(uid, u)
			n.forgetLocked(uid, u)
		}
	}
	n.mu.Unlock()
	n.v.flush()
}

// recentStall returns the last stall of the clock if it was within a
// timeout, else the zero Time.
func (n *Node) recentStall() time.Time {
	if n.stalled == nil {
		return time.Time{}
	}
	if st := n.stalled(); !st.IsZero() && time.Since(st) < n.leases.Timeout() {
		return st
	}
	return time.Time{}
}

// reprieve reports whether u may have its lease or grace put off for stall,
// and records that it had, once per stall.
func reprieve(u *userState, stall time.Time) bool {
	if stall.IsZero() || u.reprieved == stall.UnixNano() {
		return false
	}
	u.reprieved = stall.UnixNano()
	return true
}

// Shutdown ends every lease and grace period now, so this node's users that
// have no live connection go offline, and refuses new connections and
// heartbeats. Connections still live leave as they are disconnected, with no
// grace period.
func (n *Node) Shutdown() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closing = true
	for uid, u := range n.users {
		if u.lease != nil {
			n.leases.Remove(uid)
			cs := u.lease
			u.lease = nil
			n.detachLocked(cs)
		}
		if u.inGrace {
			n.endGraceLocked(uid, u)
			n.forgetLocked(uid, u)
		}
	}
}

// LocalUsers is how many users this node holds a connection, lease or grace
// period of.
func (n *Node) LocalUsers() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.users)
}

// User returns the number of live connections of uid on every node.
func (n *Node) User(ctx context.Context, uid string) (int, error) {
	return n.engine.User(ctx, uid)
}

// Users returns how many users are online on every node and up to limit of
// their IDs in ascending order.
func (n *Node) Users(ctx context.Context, limit int) (int, []string, error) {
	return n.engine.Users(ctx, limit)
}

// Members returns how many members channel has on every node and up to
// limit of their IDs in ascending order.
func (n *Node) Members(ctx context.Context, channel string, limit int) (count int, members []string, err error) {
	if !ValidChannel(channel) {
		return 0, nil, ErrInvalidChannel
	}
	if n.router != nil {
		return n.router.Members(ctx, channel, limit)
	}
	count, members = n.v.members(channel, limit)
	return count, members, nil
}

// Chat sends text from c's user to every member connection of channel, on
// every node, c included; c must have joined channel.
func (n *Node) Chat(ctx context.Context, c Client, channel, text string) error {
	n.mu.Lock()
	cs := n.conns[c]
	joined := cs != nil && slices.Contains(cs.channels, channel)
	n.mu.Unlock()
	if !joined {
		return ErrNotJoined
	}
	frame := mustJSON(chatFrame{Type: "chat", Channel: channel, From: cs.uid, Text: text})
	return n.engine.Publish(ctx, Message{Channel: channel, Frame: frame})
}

// Publish sends data, valid JSON, in a publish frame to every connection
// that joined channel, on every node.
func (n *Node) Publish(ctx context.Context, channel string, data json.RawMessage) error {
	if !ValidChannel(channel) {
		return ErrInvalidChannel
	}
	if !json.Valid(data) {
		return errors.New("presence: Publish: data is not valid JSON")
	}
	frame := mustJSON(publishFrame{Type: "publish", Channel: channel, Data: data})
	return n.engine.Publish(ctx, Message{Channel: channel, Frame: frame})
}

// Send sends data, valid JSON, in a message frame to every connection of
// uid, on every node.
func (n *Node) Send(ctx context.Context, uid string, data json.RawMessage) error {
	if !json.Valid(data) {
		return errors.New("presence: Send: data is not valid JSON")
	}
	frame := mustJSON(messageFrame{Type: "message", Data: data})
	return n.engine.Publish(ctx, Message{UID: uid, Frame: frame})
}

// DisconnectUser ends every connection of uid, on every node.
func (n *Node) DisconnectUser(ctx context.Context, uid string) error {
	return n.engine.Publish(ctx, Message{UID: uid, Disconnect: true})
}

// Close releases the Node's rings and waits for pending OnPresence calls.
// Call it after Shutdown, once every connection is disconnected.
func (n *Node) Close() {
	n.leases.Close()
	n.graces.Close()
	n.v.notify.close()
}
