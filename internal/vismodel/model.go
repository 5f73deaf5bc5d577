package vismodel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// Env is where a history runs: fresh Nodes with Slots slots, stepped only
// by Run. Connection #i lives on Nodes[i%len(Nodes)], user ui's lease on
// Nodes[i%len(Nodes)].
type Env struct {
	Nodes []*presence.Node
	// Settle, if set, waits until the changes made so far are in the
	// shared store: for an engine that writes in the background.
	Settle func()
	// Converge, if not zero, is how long the checks of a tick may retry,
	// stepping every node again, until they hold: for an engine whose
	// edges reach the views after the change that made them. Extra steps
	// would end leases early: use histories without them.
	Converge time.Duration
}

// model is the truth of a history, and where it runs.
type model struct {
	env    Env
	conns  map[int]*mconn // the live connections, by the op that opened them
	users  map[string]*muser
	leases map[string]*lease
	tick   int
	quiet  bool  // a tick whose frames are taken in but not checked
	fatal  error // a frame no retry can undo
	// allowed holds what a frame may show of others since the last check
	// that held: a user in a channel, or online (channel ""), where it was
	// visible at that check or after an operation since.
	allowed map[sighting]bool
}

type mconn struct {
	c      *client
	node   *presence.Node
	uid    string
	joined map[string]bool
	watch  []string
	obs    observer
}

type lease struct {
	chans map[string]bool
	end   int // the tick it has run out by
}

// muser is what the model knows of a user: its record, and the windows
// (Unix ms) in which it last went offline and turned invisible.
type muser struct {
	mode           string
	note           string
	seen           bool
	seenLo, seenHi int64
	hidLo, hidHi   int64
}

// client is a connection as a Node sees it: it keeps its frames.
type client struct {
	mu     sync.Mutex
	frames []string
}

func (c *client) Send(f protocol.Encoded) {
	c.mu.Lock()
	c.frames = append(c.frames, string(f.Data))
	c.mu.Unlock()
}

func (c *client) Probe()            {}
func (c *client) Close(int, string) {}

func (c *client) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.frames
	c.frames = nil
	return f
}

// Run runs ops in env and returns the first divergence from the model.
func Run(ops []Op, env Env) error {
	m := &model{env: env, conns: map[int]*mconn{}, users: map[string]*muser{}, leases: map[string]*lease{}, allowed: map[sighting]bool{}}
	for u := range users {
		m.users[fmt.Sprintf("u%d", u)] = &muser{}
	}
	for i, op := range ops {
		if err := m.do(op); err != nil {
			return fmt.Errorf("op %d (%v): %w", i, op, err)
		}
		if err := m.converge(m.checkKeyless); err != nil {
			return fmt.Errorf("after op %d (%v): keyless: %w", i, op, err)
		}
	}
	return nil
}

// converge runs check once, or with Converge until it holds or the time
// is up, stepping every node in between.
func (m *model) converge(check func() error) error {
	deadline := time.Now().Add(m.env.Converge)
	for {
		err := check()
		if err == nil || m.fatal != nil || m.env.Converge == 0 || time.Now().After(deadline) {
			return err
		}
		m.settle()
		m.stepNodes()
	}
}

func (m *model) settle() {
	if m.env.Settle != nil {
		m.env.Settle()
	}
}

func (m *model) node(i int) *presence.Node { return m.env.Nodes[i%len(m.env.Nodes)] }

func (m *model) liveConns(uid string) int {
	n := 0
	for _, c := range m.conns {
		if c.uid == uid {
			n++
		}
	}
	if m.leases[uid] != nil {
		n++
	}
	return n
}

func (m *model) visible(uid string) bool {
	return m.liveConns(uid) > 0 && m.users[uid].mode != protocol.ModeInvisible
}

func (m *model) member(uid, ch string) bool {
	for _, c := range m.conns {
		if c.uid == uid && c.joined[ch] {
			return true
		}
	}
	l := m.leases[uid]
	return l != nil && l.chans[ch]
}

// record is uid's whole record; others see it without invisible.
func (m *model) record(uid string, whole bool) protocol.Record {
	u := m.users[uid]
	r := protocol.Record{Mode: u.mode}
	if u.note != "" {
		r.Note = &protocol.Note{Text: u.note}
	}
	if !whole && r.Mode == protocol.ModeInvisible {
		r.Mode = ""
	}
	return r
}

// lastSeen is the window in which others saw uid go (ok false: never).
func (m *model) lastSeen(uid string) (lo, hi int64, ok bool) {
	u := m.users[uid]
	if u.mode == protocol.ModeInvisible {
		return u.hidLo, u.hidHi, true
	}
	return u.seenLo, u.seenHi, u.seen
}

// visibleMembers lists ch's members others see, sorted.
func (m *model) visibleMembers(ch string) []string {
	out := []string{}
	for uid := range m.users {
		if m.visible(uid) && m.member(uid, ch) {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out
}

// errSkip marks an operation that does not apply to the state it finds.
var errSkip = errors.New("skipped")

// do runs op, then notes who went offline or turned invisible during it:
// by the time the engine has it written.
func (m *model) do(op Op) error {
	online := map[string]bool{}
	wasMode := map[string]string{}
	for uid, u := range m.users {
		online[uid] = m.liveConns(uid) > 0
		wasMode[uid] = u.mode
	}
	lo := time.Now().UnixMilli()
	err := m.apply(op)
	if errors.Is(err, errSkip) {
		err = nil
	}
	m.settle()
	m.allow()
	hi := time.Now().UnixMilli()
	for uid, u := range m.users {
		if online[uid] && m.liveConns(uid) == 0 {
			u.seen, u.seenLo, u.seenHi = true, lo, hi
		}
		if wasMode[uid] != protocol.ModeInvisible && u.mode == protocol.ModeInvisible {
			u.hidLo, u.hidHi = lo, hi
		}
	}
	return err
}

func (m *model) apply(op Op) error {
	ctx := context.Background()
	switch op.Kind {
	case Connect, Reconnect:
		uid, chans, watch := fmt.Sprintf("u%d", op.UID), []string{channels[op.Ch]}, []string(nil)
		if op.Kind == Reconnect {
			old := m.conns[op.UID]
			if old == nil {
				return errSkip
			}
			old.node.Disconnect(old.c)
			delete(m.conns, op.UID)
			uid, chans, watch = old.uid, slices.Sorted(maps.Keys(old.joined)), old.watch
		}
		nc := &mconn{c: &client{}, node: m.node(op.Conn), uid: uid, joined: map[string]bool{}}
		if err := nc.node.Connect(ctx, nc.c, uid, chans); err != nil {
			return err
		}
		for _, ch := range chans {
			nc.joined[ch] = true
		}
		m.conns[op.Conn] = nc
		if watch != nil {
			nc.watch = watch
			return nc.node.Watch(ctx, nc.c, watch)
		}
		return nil
	case Tick:
		return m.step()
	case Lapse:
		for range Slots {
			if err := m.step(); err != nil {
				return err
			}
		}
		return nil
	case Heartbeat:
		uid := fmt.Sprintf("u%d", op.UID)
		l := &lease{chans: map[string]bool{}, end: m.tick + Slots}
		var chans []string
		for i, ch := range channels {
			if op.Chans&(1<<i) != 0 {
				l.chans[ch] = true
				chans = append(chans, ch)
			}
		}
		m.leases[uid] = l
		return m.node(op.UID).Heartbeat(uid, chans)
	}
	c := m.conns[op.Conn]
	if c == nil {
		return errSkip
	}
	return m.applyConn(ctx, op, c)
}

// applyConn runs an op of one live connection.
func (m *model) applyConn(ctx context.Context, op Op, c *mconn) error {
	ch := channels[op.Ch]
	switch op.Kind {
	case Close:
		c.node.Disconnect(c.c)
		delete(m.conns, op.Conn)
	case Join:
		if c.joined[ch] {
			return errSkip
		}
		c.joined[ch] = true
		return c.node.Join(ctx, c.c, ch)
	case HideJoin:
		if c.joined[ch] {
			return errSkip
		}
		m.users[c.uid].mode = protocol.ModeInvisible
		if err := c.node.Set(c.c, protocol.Set{Mode: protocol.ModeInvisible}); err != nil {
			return err
		}
		c.joined[ch] = true
		if err := c.node.Join(ctx, c.c, ch); err != nil {
			return err
		}
		return m.spin()
	case Leave:
		if !c.joined[ch] {
			return errSkip
		}
		delete(c.joined, ch)
		return c.node.Leave(c.c, ch)
	case Mode:
		m.users[c.uid].mode = op.Mode
		if op.Mode == protocol.ModeOnline {
			m.users[c.uid].mode = ""
		}
		return c.node.Set(c.c, protocol.Set{Mode: op.Mode})
	case Note:
		set := protocol.Set{NoteSet: true}
		if op.Text != "" {
			set.Note = &protocol.Note{Text: op.Text}
		}
		m.users[c.uid].note = op.Text
		return c.node.Set(c.c, set)
	case Flash:
		until := time.Now().Add(15 * time.Millisecond).UnixMilli()
		if err := c.node.Set(c.c, protocol.Set{NoteSet: true, Note: &protocol.Note{Text: "soon", Until: until}}); err != nil {
			return err
		}
		for time.Now().UnixMilli() <= until {
			time.Sleep(time.Millisecond) // the wall clock must pass until: nothing else moves it
		}
		m.users[c.uid].note = ""
		m.settle()
		m.quiet = true // the first step may clear it or not yet
		err := m.step()
		m.quiet = false
		if err != nil {
			return err
		}
		m.settle()
		return m.step()
	case Watch:
		c.watch = []string{}
		for _, u := range op.Watch {
			if uid := fmt.Sprintf("u%d", u); uid != c.uid {
				c.watch = append(c.watch, uid)
			}
		}
		return c.node.Watch(ctx, c.c, c.watch)
	}
	return nil
}

// stepNodes keeps every connection alive and steps every node's clock.
func (m *model) stepNodes() {
	for _, c := range m.conns {
		c.node.Touch(c.c)
	}
	for _, n := range m.env.Nodes {
		n.Step()
	}
}

// step is a tick: it steps the clocks, ends the leases that ran out, and
// checks what each connection now believes.
func (m *model) step() error {
	m.settle()
	lo := time.Now().UnixMilli()
	m.stepNodes()
	hi := time.Now().UnixMilli()
	m.tick++
	for uid, l := range m.leases {
		if m.tick >= l.end {
			delete(m.leases, uid)
			if u := m.users[uid]; m.liveConns(uid) == 0 {
				u.seen, u.seenLo, u.seenHi = true, lo, hi
			}
		}
	}
	err := m.converge(func() error {
		for id, c := range m.conns {
			for _, f := range c.c.take() {
				if err := c.obs.take(f, c.watch); err != nil {
					m.fatal = fmt.Errorf("#%d (%s): %w", id, c.uid, err)
					return m.fatal
				}
				if err := m.checkShown(c); err != nil {
					m.fatal = fmt.Errorf("#%d (%s): %w: %s", id, c.uid, err, f)
					return m.fatal
				}
			}
		}
		if m.quiet {
			return nil
		}
		for id, c := range m.conns {
			if err := m.checkConn(c); err != nil {
				return fmt.Errorf("#%d (%s) after tick %d: %w", id, c.uid, m.tick, err)
			}
		}
		return nil
	})
	if err == nil && !m.quiet {
		clear(m.allowed)
		m.allow()
	}
	return err
}

// spin steps the nodes as fast as it can for a while, with an engine that
// writes in the background, checking only what each frame shows: a change
// and the edges it makes may reach a view in more than one piece, and a
// step between them must show nothing it should not.
func (m *model) spin() error {
	if m.env.Converge == 0 {
		return nil // no pieces: the memory engine delivers at once
	}
	for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		m.stepNodes()
		for id, c := range m.conns {
			for _, f := range c.c.take() {
				if err := c.obs.take(f, c.watch); err != nil {
					return fmt.Errorf("#%d (%s): %w", id, c.uid, err)
				}
				if err := m.checkShown(c); err != nil {
					return fmt.Errorf("#%d (%s): %w: %s", id, c.uid, err, f)
				}
			}
		}
	}
	return nil
}

// A sighting is a user shown in a channel, or online (channel "").
type sighting struct{ ch, uid string }

// allow adds what others may see now to what frames may show.
func (m *model) allow() {
	for uid := range m.users {
		if !m.visible(uid) {
			continue
		}
		m.allowed[sighting{"", uid}] = true
		for _, ch := range channels {
			if m.member(uid, ch) {
				m.allowed[sighting{ch, uid}] = true
			}
		}
	}
}

// checkShown fails a frame that showed c another user where that user was
// never visible since the last check: even for a tick, until a leave or
// an offline takes it back.
func (m *model) checkShown(c *mconn) error {
	defer func() { c.obs.shown = c.obs.shown[:0] }()
	for _, s := range c.obs.shown {
		if s.uid != c.uid && !m.allowed[s] {
			if s.ch == "" {
				return fmt.Errorf("%s shown online, invisible or offline all along", s.uid)
			}
			return fmt.Errorf("%s shown in %s, never visible there", s.uid, s.ch)
		}
	}
	return nil
}
