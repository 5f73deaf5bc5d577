package cluster

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// frameConn is a connection as a presence.Node sees it that keeps the
// presence and status frames it is sent.
type frameConn struct {
	mu     sync.Mutex
	frames []sentFrame
}

type sentFrame struct {
	typ string
	p   struct {
		Joins    []string                   `json:"joins"`
		Leaves   []string                   `json:"leaves"`
		Online   []string                   `json:"online"`
		Offline  []string                   `json:"offline"`
		Users    map[string]protocol.Record `json:"users"`
		Updated  map[string]protocol.Record `json:"updated"`
		LastSeen map[string]int64           `json:"last_seen"`
	}
}

func (c *frameConn) Send(f protocol.Encoded) {
	sf := sentFrame{typ: f.Type}
	_ = json.Unmarshal(f.Data, &sf.p)
	c.mu.Lock()
	c.frames = append(c.frames, sf)
	c.mu.Unlock()
}
func (*frameConn) Probe()            {}
func (*frameConn) Close(int, string) {}

// updates returns the records of uid that presence and status frames
// carried in updated, in order.
func (c *frameConn) updates(uid string) []protocol.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []protocol.Record
	for _, f := range c.frames {
		if rec, ok := f.p.Updated[uid]; ok {
			out = append(out, rec)
		}
	}
	return out
}

// records returns uid's records as the frames so far showed them, in
// order: in the users of a join or status, or in updated.
func (c *frameConn) records(uid string) []protocol.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []protocol.Record
	for _, f := range c.frames {
		if r, ok := f.p.Users[uid]; ok {
			out = append(out, r)
		}
		if r, ok := f.p.Updated[uid]; ok {
			out = append(out, r)
		}
	}
	return out
}

// lastRecord returns uid's record as the frames so far last showed it.
func (c *frameConn) lastRecord(uid string) (protocol.Record, bool) {
	recs := c.records(uid)
	if len(recs) == 0 {
		return protocol.Record{}, false
	}
	return recs[len(recs)-1], true
}

// saw reports whether a frame of typ passes match.
func (c *frameConn) saw(typ string, match func(sentFrame) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.frames, func(f sentFrame) bool { return f.typ == typ && match(f) })
}

// edgeLog keeps the edges several Nodes hand to OnEdges.
type edgeLog struct {
	mu    sync.Mutex
	edges map[string][]presence.Edge // node -> edges, in order
}

func (l *edgeLog) on(node string) func([]presence.Edge) {
	return func(es []presence.Edge) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.edges[node] = append(l.edges[node], es...)
	}
}

// updates returns, per node, the update edges of uid.
func (l *edgeLog) updates(uid string) map[string][]protocol.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]protocol.Record{}
	for n, es := range l.edges {
		for _, e := range es {
			if e.Kind == presence.EdgeUpdate && e.UID == uid {
				out[n] = append(out[n], e.Record)
			}
		}
	}
	return out
}

// recNode is a presence.Node on a cluster engine whose clock the test
// steps, with its connections, touched at each step so none times out.
type recNode struct {
	*presence.Node
	e     *Engine
	mu    sync.Mutex
	conns []presence.Client
}

func startRecordNode(t *testing.T, srv *redisServer, name string, log *edgeLog) *recNode {
	t.Helper()
	e, err := New(testConfig(srv.client(t), name))
	require.NoError(t, err)
	n, err := presence.New(presence.Config{Engine: e, Slots: 61, Tick: time.Second, OnEdges: log.on(name)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		e.crash()
		cancel()
		<-done
		n.Close()
	})
	return &recNode{Node: n, e: e}
}

func (n *recNode) connect(t *testing.T, uid string, channels ...string) *frameConn {
	t.Helper()
	c := &frameConn{}
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	require.NoError(t, n.Connect(ctx, c, uid, channels))
	n.mu.Lock()
	n.conns = append(n.conns, c)
	n.mu.Unlock()
	return c
}

func (n *recNode) disconnect(c presence.Client) {
	n.mu.Lock()
	n.conns = slices.DeleteFunc(n.conns, func(x presence.Client) bool { return x == c })
	n.mu.Unlock()
	n.Disconnect(c)
}

// step steps the clock once, its connections kept alive.
func (n *recNode) step() {
	n.mu.Lock()
	cs := slices.Clone(n.conns)
	n.mu.Unlock()
	for _, c := range cs {
		n.Touch(c)
	}
	n.Step()
}

// waitSteps steps the nodes' clocks until check holds.
func waitSteps(t *testing.T, what string, check func(ct *assert.CollectT), nodes ...*recNode) {
	t.Helper()
	eventually(t, what, func(ct *assert.CollectT) {
		for _, n := range nodes {
			n.step()
		}
		check(ct)
	})
}

func dnd() protocol.Set { return protocol.Set{Mode: protocol.ModeDND} }

// A set on node a reaches the members of a channel on node b as updated,
// once; an invisible user is, to b's clients, a member that left; the
// HTTP reads of either node tell the truth with the key, and Hidden says
// who is invisible.
func TestRecordSetReachesOtherNodeAndInvisibleHides(t *testing.T) {
	srv := startRedis(t)
	log := &edgeLog{edges: map[string][]presence.Edge{}}
	a := startRecordNode(t, srv, "a", log)
	b := startRecordNode(t, srv, "b", log)
	ctx := context.Background()

	bob := b.connect(t, "bob", "lobby")
	alice := a.connect(t, "alice", "lobby")
	waitSteps(t, "alice joins on b", func(ct *assert.CollectT) {
		assert.True(ct, bob.saw("presence", func(f sentFrame) bool { return slices.Contains(f.p.Joins, "alice") }))
	}, a, b)

	require.NoError(t, a.Set(alice, dnd()))
	waitSteps(t, "alice's dnd on b", func(ct *assert.CollectT) {
		assert.Equal(ct, []protocol.Record{{Mode: protocol.ModeDND}}, bob.updates("alice"))
	}, a, b)
	waitSteps(t, "one update edge, on a", func(ct *assert.CollectT) {
		assert.Equal(ct, map[string][]protocol.Record{"a": {{Mode: protocol.ModeDND}}}, log.updates("alice"))
	}, a, b)
	st, err := b.Status(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, protocol.Record{Mode: protocol.ModeDND}, st.Record)
	assert.True(t, st.HiddenAt.IsZero())

	// The same set again changes nothing: no edge, no frame.
	require.NoError(t, a.Set(alice, dnd()))
	note := &protocol.Note{Text: "lunch"}
	require.NoError(t, a.Set(alice, protocol.Set{Note: note, NoteSet: true}))
	waitSteps(t, "alice's note on b", func(ct *assert.CollectT) {
		assert.Len(ct, bob.updates("alice"), 2)
	}, a, b)
	assert.Equal(t, protocol.Record{Mode: protocol.ModeDND, Note: note}, bob.updates("alice")[1])
	// OnEdges hears of a tick's edges after the tick.
	waitSteps(t, "the note's edge", func(ct *assert.CollectT) {
		assert.Equal(ct, []protocol.Record{{Mode: protocol.ModeDND}, {Mode: protocol.ModeDND, Note: note}}, log.updates("alice")["a"],
			"the repeated dnd made no edge")
	}, a, b)

	before := time.Now()
	require.NoError(t, a.Set(alice, protocol.Set{Mode: protocol.ModeInvisible}))
	waitSteps(t, "alice leaves, as b's clients see it", func(ct *assert.CollectT) {
		assert.True(ct, bob.saw("presence", func(f sentFrame) bool { return slices.Contains(f.p.Leaves, "alice") }))
	}, a, b)
	count, members, _, err := b.VisibleMembers(ctx, "lobby", "", 10)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
	assert.Equal(t, []string{"bob"}, members)
	for _, n := range []*recNode{a, b} {
		hidden, err := n.e.Hidden(ctx, "lobby")
		require.NoError(t, err)
		assert.Equal(t, []string{"alice"}, hidden)
		hidden, err = n.e.Hidden(ctx, "")
		require.NoError(t, err)
		assert.Equal(t, []string{"alice"}, hidden)
		hidden, err = n.e.Hidden(ctx, "elsewhere")
		require.NoError(t, err)
		assert.Empty(t, hidden)
	}
	st, err = b.Status(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, 1, st.Conns)
	assert.Equal(t, protocol.ModeInvisible, st.Record.Mode)
	assert.WithinRange(t, st.HiddenAt, before.Add(-time.Second), time.Now().Add(time.Second))
	vs, err := b.VisibleStatus(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, 0, vs.Conns)
	assert.Equal(t, st.HiddenAt, vs.LastSeen)

	// A client that joins on b now does not see alice either.
	carol := b.connect(t, "carol", "lobby")
	waitSteps(t, "b steps", func(ct *assert.CollectT) {}, a, b)
	assert.False(t, carol.saw("presence", func(f sentFrame) bool { return slices.Contains(f.p.Joins, "alice") }))

	require.NoError(t, a.Set(alice, protocol.Set{Mode: protocol.ModeOnline}))
	waitSteps(t, "alice back on b, with her record", func(ct *assert.CollectT) {
		assert.True(ct, carol.saw("presence", func(f sentFrame) bool {
			return slices.Contains(f.p.Joins, "alice") && f.p.Users["alice"].Note != nil
		}))
	}, a, b)
	hidden, err := b.e.Hidden(ctx, "lobby")
	require.NoError(t, err)
	assert.Empty(t, hidden)
}

// A member that is invisible before another node follows its channel is
// left out of that node's snapshot: the channel's shard has its record.
func TestRecordInvisibleMemberHiddenInSnapshot(t *testing.T) {
	srv := startRedis(t)
	log := &edgeLog{edges: map[string][]presence.Edge{}}
	a := startRecordNode(t, srv, "a", log)
	b := startRecordNode(t, srv, "b", log)
	ctx := context.Background()

	alice := a.connect(t, "alice", "lobby")
	require.NoError(t, a.Set(alice, protocol.Set{Mode: protocol.ModeInvisible}))
	waitSteps(t, "alice invisible in redis", func(ct *assert.CollectT) {
		hidden, err := a.e.Hidden(ctx, "lobby")
		assert.NoError(ct, err)
		assert.Equal(ct, []string{"alice"}, hidden)
	}, a)
	// The channel's copy of her record comes from a, which heard of the
	// change on her topic.
	waitSteps(t, "the channel's copy", func(ct *assert.CollectT) {
		k := a.e.keys[a.e.shard("lobby")]
		copy, err := srv.client(t).HGet(ctx, k.tag+":mr", "lobby alice").Result()
		assert.NoError(ct, err)
		assert.Contains(ct, copy, `"mode":"invisible"`)
	}, a)

	bob := b.connect(t, "bob", "lobby")
	dave := b.connect(t, "dave", "lobby")
	waitSteps(t, "b steps", func(ct *assert.CollectT) {
		assert.True(ct, bob.saw("presence", func(f sentFrame) bool { return slices.Contains(f.p.Joins, "dave") }))
	}, a, b)
	// bob sees dave join from b's own view, before b's writes reach Redis,
	// which the count and list are read from.
	waitSteps(t, "bob and dave in redis, alice hidden", func(ct *assert.CollectT) {
		count, members, _, err := b.VisibleMembers(ctx, "lobby", "", 10)
		assert.NoError(ct, err)
		assert.Equal(ct, 2, count)
		assert.Equal(ct, []string{"bob", "dave"}, members)
	}, a, b)
	for _, c := range []*frameConn{bob, dave} {
		assert.False(t, c.saw("presence", func(f sentFrame) bool { return slices.Contains(f.p.Joins, "alice") }))
	}
}

// A note that runs out is cleared once across the nodes whose clients see
// it: both clocks ask, one clears it, and one update edge goes out.
func TestRecordNoteExpiresOnceAcrossNodes(t *testing.T) {
	srv := startRedis(t)
	log := &edgeLog{edges: map[string][]presence.Edge{}}
	a := startRecordNode(t, srv, "a", log)
	b := startRecordNode(t, srv, "b", log)

	alice := a.connect(t, "alice", "lobby")
	// alice is on both nodes, so both views time her note; her own
	// connections see it whole, whatever the time.
	alice2 := b.connect(t, "alice", "lobby")
	until := time.Now().Add(2 * time.Second).UnixMilli()
	note := &protocol.Note{Text: "brb", Until: until}
	require.NoError(t, a.Set(alice, protocol.Set{Note: note, NoteSet: true}))
	waitSteps(t, "the note on both nodes", func(ct *assert.CollectT) {
		assert.Contains(ct, alice.records("alice"), protocol.Record{Note: note})
		assert.Contains(ct, alice2.records("alice"), protocol.Record{Note: note})
	}, a, b)
	// Other clients drop a note at its until by themselves; in Redis the
	// clock clears it, as one update edge.
	waitSteps(t, "the note cleared in redis, the set and the clear made", func(ct *assert.CollectT) {
		st, err := b.Status(context.Background(), "alice")
		assert.NoError(ct, err)
		assert.Equal(ct, 2, st.Conns)
		assert.Nil(ct, st.Record.Note)
		all := log.updates("alice")
		assert.Len(ct, append(all["a"], all["b"]...), 2)
	}, a, b)
	// Both nodes asked by now; let a late second clear show.
	for range 20 {
		a.step()
		b.step()
		time.Sleep(10 * time.Millisecond)
	}
	all := log.updates("alice")
	assert.Len(t, append(all["a"], all["b"]...), 2, "the set and one expiry: %v", all)
	assert.Equal(t, []protocol.Record{{Note: note}}, all["a"][:1])
	assert.Contains(t, alice2.records("alice"), protocol.Record{}, "alice's own connection on b heard of the clear")
	recs, err := b.Records(context.Background(), []string{"alice"})
	require.NoError(t, err)
	assert.Empty(t, recs)
}

// A record outlives its user's connections by the last-seen TTL: a user
// who reconnects, on another node, finds its mode and note; info comes from
// its connections.
func TestRecordSurvivesReconnect(t *testing.T) {
	srv := startRedis(t)
	log := &edgeLog{edges: map[string][]presence.Edge{}}
	a := startRecordNode(t, srv, "a", log)
	b := startRecordNode(t, srv, "b", log)
	ctx := context.Background()

	bob := b.connect(t, "bob", "lobby")
	require.NoError(t, b.Watch(ctx, bob, []string{"alice"}))
	alice := a.connect(t, "alice", "lobby")
	note := &protocol.Note{Text: "away from desk", Emoji: "🏖"}
	require.NoError(t, a.Set(alice, protocol.Set{Mode: protocol.ModeDND, Note: note, NoteSet: true}))
	want := protocol.Record{Mode: protocol.ModeDND, Note: note}
	waitSteps(t, "alice's record on b", func(ct *assert.CollectT) {
		rec, _ := bob.lastRecord("alice")
		assert.Equal(ct, want, rec)
	}, a, b)
	a.disconnect(alice)
	waitSteps(t, "alice offline on b", func(ct *assert.CollectT) {
		assert.True(ct, bob.saw("status", func(f sentFrame) bool { return slices.Contains(f.p.Offline, "alice") }))
	}, a, b)
	st, err := b.Status(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, 0, st.Conns)
	assert.Equal(t, want, st.Record, "kept while offline")
	assert.False(t, st.LastSeen.IsZero())

	// A node that starts following her now hears when she went, though it
	// never saw her go: its Relay has it with the snapshot.
	seen := &seenRelay{at: map[string]time.Time{}}
	startNodeRelay(t, testConfig(srv.client(t), "c"), func(_ *Engine, r *recorder) presence.Relay {
		seen.recorder = r
		return seen
	}).follow(t, "alice")
	assert.Equal(t, st.LastSeen, seen.get("alice"), "the snapshot of offline alice carries her last seen")
	// And a node's first watcher of her gets it in its watching frame.
	c := startRecordNode(t, srv, "c", log)
	carol := c.connect(t, "carol")
	require.NoError(t, c.Watch(ctx, carol, []string{"alice"}))
	assert.True(t, carol.saw("watching", func(f sentFrame) bool {
		return f.p.LastSeen["alice"] == st.LastSeen.UnixMilli()
	}), "the watching frame on a node that never saw her go says when she went")

	b.connect(t, "alice", "lobby")
	waitSteps(t, "alice back on b's lobby, with her record", func(ct *assert.CollectT) {
		assert.True(ct, bob.saw("presence", func(f sentFrame) bool {
			return slices.Contains(f.p.Joins, "alice") && f.p.Users["alice"].Equal(want)
		}))
	}, a, b)
	recs, err := a.Records(ctx, []string{"alice", "bob"})
	require.NoError(t, err)
	assert.Equal(t, map[string]protocol.Record{"alice": want}, recs)
}

// seenRelay is a recorder that keeps the time of every offline EventUser,
// snapshots' included.
type seenRelay struct {
	*recorder
	mu sync.Mutex
	at map[string]time.Time
}

func (r *seenRelay) Receive(e presence.Event) {
	if e.Kind == presence.EventUser && !e.On {
		r.mu.Lock()
		r.at[e.UID] = e.At
		r.mu.Unlock()
	}
	r.recorder.Receive(e)
}

func (r *seenRelay) get(uid string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[uid]
}

// infoConn is a frameConn that brings its user's info, as a token's claim
// does.
type infoConn struct {
	frameConn
	info json.RawMessage
}

func (c *infoConn) Info() json.RawMessage { return c.info }

// The same scenario on the in-memory engine and on two cluster nodes
// leaves the same records, invisible users and statuses.
func TestRecordsAgreeWithTheMemoryEngine(t *testing.T) {
	srv := startRedis(t)
	log := &edgeLog{edges: map[string][]presence.Edge{}}
	a := startRecordNode(t, srv, "a", log)
	b := startRecordNode(t, srv, "b", log)
	mem := presence.NewMemoryEngine()
	m, err := presence.New(presence.Config{Engine: mem, Slots: 61, Tick: time.Second})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	ctx := context.Background()

	type step struct {
		uid  string
		node int // where it connects: 0 a, 1 b
		set  *protocol.Set
		info string
		bye  bool
	}
	note := &protocol.Note{Text: "on call", Emoji: "📟", Until: time.Now().Add(time.Hour).UnixMilli()}
	steps := []step{
		{uid: "alice", node: 0, info: `{"name":"Alice"}`},
		{uid: "bob", node: 1},
		{uid: "carol", node: 1, info: `{"name":"Carol"}`},
		{uid: "alice", set: &protocol.Set{Mode: protocol.ModeDND, Note: note, NoteSet: true}},
		{uid: "carol", set: &protocol.Set{Mode: protocol.ModeInvisible}},
		{uid: "bob", set: &protocol.Set{Note: &protocol.Note{Text: "hi"}, NoteSet: true}},
		{uid: "bob", set: &protocol.Set{Note: nil, NoteSet: true}},
		{uid: "dave", node: 0},
		{uid: "dave", set: &protocol.Set{Mode: protocol.ModeInvisible}},
		{uid: "dave", bye: true},
		{uid: "alice", set: &protocol.Set{Mode: protocol.ModeOnline}},
	}
	type held struct {
		on              *recNode
		cluster, memory presence.Client
	}
	conns := map[string]held{}
	nodes := []*recNode{a, b}
	for _, s := range steps {
		h, ok := conns[s.uid]
		switch {
		case s.bye:
			h.on.disconnect(h.cluster)
			m.Disconnect(h.memory)
			delete(conns, s.uid)
		case !ok:
			cc := &infoConn{info: json.RawMessage(s.info)}
			mc := &infoConn{info: json.RawMessage(s.info)}
			if s.info == "" {
				cc.info, mc.info = nil, nil
			}
			ctxw, cancel := context.WithTimeout(ctx, testWait)
			require.NoError(t, nodes[s.node].Connect(ctxw, cc, s.uid, []string{"lobby"}))
			cancel()
			nodes[s.node].mu.Lock()
			nodes[s.node].conns = append(nodes[s.node].conns, cc)
			nodes[s.node].mu.Unlock()
			require.NoError(t, m.Connect(ctx, mc, s.uid, []string{"lobby"}))
			conns[s.uid] = held{nodes[s.node], cc, mc}
		default:
			require.NoError(t, h.on.Set(h.cluster, *s.set))
			require.NoError(t, m.Set(h.memory, *s.set))
		}
	}
	uids := []string{"alice", "bob", "carol", "dave", "erin"}
	waitSteps(t, "the cluster agrees with the memory engine", func(ct *assert.CollectT) {
		for _, n := range nodes {
			want, err := m.Records(ctx, uids)
			require.NoError(ct, err)
			got, err := n.Records(ctx, uids)
			assert.NoError(ct, err)
			assert.Equal(ct, want, got, "records")
			for _, ch := range []string{"", "lobby"} {
				want, err := mem.Hidden(ctx, ch)
				require.NoError(ct, err)
				got, err := n.e.Hidden(ctx, ch)
				assert.NoError(ct, err)
				assert.Equal(ct, want, got, "hidden in %q", ch)
			}
			for _, uid := range uids {
				want, err := m.Status(ctx, uid)
				require.NoError(ct, err)
				got, err := n.Status(ctx, uid)
				assert.NoError(ct, err)
				assert.Equal(ct, want.Conns, got.Conns, uid)
				assert.Equal(ct, want.Record, got.Record, uid)
				assert.Equal(ct, want.HiddenAt.IsZero(), got.HiddenAt.IsZero(), uid)
				assert.Equal(ct, want.LastSeen.IsZero(), got.LastSeen.IsZero(), uid)
			}
		}
	}, a, b)
}
