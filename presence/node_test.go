package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// client records the frames a Node sends it.
type client struct {
	name   string
	mu     sync.Mutex
	frames []string
	closes []string
}

// Close records the close; a test client stays connected until the test
// disconnects it.
func (c *client) Close(code int, reason string) {
	c.mu.Lock()
	c.closes = append(c.closes, fmt.Sprintf("%d %s", code, reason))
	c.mu.Unlock()
}

func (c *client) Probe() {}

func (c *client) Send(f protocol.Encoded) { c.record(string(f.Data)) }

func (c *client) record(s string) {
	c.mu.Lock()
	c.frames = append(c.frames, s)
	c.mu.Unlock()
}

// take returns the frames received since the last take, without status
// frames' last-seen times, which are wall clock (takeRaw keeps them).
func (c *client) take() []string {
	f := c.takeRaw()
	for i := range f {
		f[i] = lastSeenField.ReplaceAllString(f[i], "")
	}
	return f
}

var lastSeenField = regexp.MustCompile(`,"last_seen":\{[^}]*\}`)

func (c *client) takeRaw() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.frames
	c.frames = nil
	return f
}

// newNode returns a Node with a 3-slot ring (a lease lasts 2 ticks),
// stepped by hand.
func newNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	if cfg.Slots == 0 {
		cfg.Slots = 3
	}
	n, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(n.Close)
	return n // its clock steps only when a test calls Step
}

func connect(t *testing.T, n *Node, uid string, channels ...string) *client {
	t.Helper()
	c := &client{name: uid}
	require.NoError(t, n.Connect(context.Background(), c, uid, channels))
	return c
}

func TestSnapshotThenOneCoalescedDiffPerTick(t *testing.T) {
	n := newNode(t, Config{})
	obs := connect(t, n, "obs", "lobby")
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":1,"members":["obs"]}`}, obs.take())

	carol := connect(t, n, "carol", "lobby")
	carol.take()
	alice := connect(t, n, "alice", "lobby")
	bob := connect(t, n, "bob", "lobby", "room")
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":3,"members":["alice","carol","obs"]}`}, alice.take())
	assert.Equal(t, []string{
		`{"type":"joined","channel":"lobby","count":4,"members":["alice","bob","carol","obs"]}`,
		`{"type":"joined","channel":"room","count":1,"members":["bob"]}`,
	}, bob.take())
	assert.Empty(t, obs.take(), "nothing before the tick")

	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":4,"joins":["alice","bob","carol"],"leaves":[]}`}, obs.take())
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":4,"joins":["alice","bob"],"leaves":[]}`}, carol.take())
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":4,"joins":["bob"],"leaves":[]}`}, alice.take())
	assert.Empty(t, bob.take(), "its snapshot said it all")

	n.Step()
	assert.Empty(t, obs.take(), "no change, no frame")
}

func TestJoinThenLeaveInsideATickCancels(t *testing.T) {
	n := newNode(t, Config{})
	obs := connect(t, n, "obs", "lobby")
	dave := connect(t, n, "dave", "lobby")
	require.NoError(t, n.Leave(dave, "lobby"))
	erin := connect(t, n, "erin", "lobby")
	n.Disconnect(erin)
	frank := connect(t, n, "frank", "lobby")
	obs.take()
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":["frank"],"leaves":[]}`}, obs.take())
	assert.Equal(t, []string{
		`{"type":"joined","channel":"lobby","count":2,"members":["dave","obs"]}`,
		`{"type":"left","channel":"lobby"}`,
	}, dave.take())

	// And a leave then a join back, by another tab, in one tick.
	tab := connect(t, n, "frank", "lobby")
	n.Disconnect(frank)
	n.Disconnect(tab)
	connect(t, n, "frank", "lobby")
	n.Step()
	assert.Empty(t, obs.take())
}

func TestTwoTabsOfOneUserInOneChannel(t *testing.T) {
	n := newNode(t, Config{})
	obs := connect(t, n, "obs", "lobby")
	obs.take()
	tab1 := connect(t, n, "alice", "lobby")
	tab2 := connect(t, n, "alice", "lobby")
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":["alice"],"leaves":[]}`}, obs.take())
	n.Disconnect(tab1)
	n.Step()
	assert.Empty(t, obs.take(), "one tab is still in")
	require.NoError(t, n.Leave(tab2, "lobby"))
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}`}, obs.take())
	conns, err := connsOf(context.Background(), n, "alice")
	require.NoError(t, err)
	assert.Equal(t, 1, conns, "still online, in no channel")
}

// A user's connections are counted one by one, up and down, and the user
// is listed once.
func TestUserCountsEachConnection(t *testing.T) {
	n := newNode(t, Config{})
	ctx := context.Background()
	conns := func(uid string) int {
		c, err := connsOf(ctx, n, uid)
		require.NoError(t, err)
		return c
	}
	tabs := []*client{connect(t, n, "alice"), connect(t, n, "alice"), connect(t, n, "alice")}
	connect(t, n, "bob")
	assert.Equal(t, 3, conns("alice"))
	assert.Equal(t, 1, conns("bob"))
	assert.Zero(t, conns("carol"))
	count, users, err := n.Users(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 2, count)
	assert.Equal(t, []string{"alice", "bob"}, users)
	for i, want := range []int{2, 1, 0} {
		n.Disconnect(tabs[i])
		assert.Equal(t, want, conns("alice"), "after %d tabs closed", i+1)
	}
	count, users, err = n.Users(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
	assert.Equal(t, []string{"bob"}, users)
}

func TestCountOnlyAboveThePresenceListLimit(t *testing.T) {
	n := newNode(t, Config{PresenceLists: 3, MemberList: 2})
	obs := connect(t, n, "obs", "big")
	obs.take()
	var others []*client
	for i := range 3 {
		others = append(others, connect(t, n, fmt.Sprintf("u%d", i), "big"))
	}
	assert.Equal(t, []string{`{"type":"joined","channel":"big","count":4,"members":["obs","u0"]}`}, others[2].take(),
		"snapshot lists are bounded, the count is exact")
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"big","count":4}`}, obs.take())
	n.Disconnect(others[0])
	connect(t, n, "u9", "big")
	n.Step()
	assert.Empty(t, obs.take(), "count unchanged: no frame")
	n.Disconnect(others[1])
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"big","count":3,"joins":[],"leaves":["u1"]}`}, obs.take(),
		"back at the limit: lists again")
}

func TestWatchListsGetCoalescedStatus(t *testing.T) {
	n := newNode(t, Config{})
	w := connect(t, n, "w")
	bob := connect(t, n, "bob")
	require.NoError(t, n.Watch(context.Background(), w, []string{"carol", "bob", "bob"}))
	assert.Equal(t, []string{`{"type":"watching","online":["bob"]}`}, w.take())

	connect(t, n, "carol")
	before := time.Now().UnixMilli()
	n.Disconnect(bob)
	after := time.Now().UnixMilli()
	connect(t, n, "dave") // not watched
	n.Step()
	st := onlyStatus(t, w.takeRaw())
	assert.Equal(t, []string{"carol"}, st.Online)
	assert.Equal(t, []string{"bob"}, st.Offline)
	require.Contains(t, st.LastSeen, "bob")
	assert.Len(t, st.LastSeen, 1, "last seen for the offline users only")
	assert.True(t, st.LastSeen["bob"] >= before && st.LastSeen["bob"] <= after, "bob's last seen %d within [%d, %d]", st.LastSeen["bob"], before, after)

	bob = connect(t, n, "bob")
	n.Disconnect(bob)
	n.Step()
	assert.Empty(t, w.take(), "back and gone within a tick")

	// Watching from mid-tick: only what follows the watching frame.
	late := connect(t, n, "late")
	bob = connect(t, n, "bob")
	require.NoError(t, n.Watch(context.Background(), late, []string{"bob"}))
	assert.Equal(t, []string{`{"type":"watching","online":["bob"]}`}, late.take())
	n.Disconnect(bob)
	n.Step()
	st = onlyStatus(t, late.takeRaw())
	assert.Equal(t, []string{}, st.Online)
	assert.Equal(t, []string{"bob"}, st.Offline)
	assert.Contains(t, st.LastSeen, "bob")
	assert.Empty(t, w.take(), "for w, bob was offline before and after")

	require.ErrorIs(t, n.Watch(context.Background(), w, make([]string, 2000)), nil, "duplicates are dropped before the limit")
	many := make([]string, protocol.MaxWatch+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	assert.ErrorIs(t, n.Watch(context.Background(), w, many), ErrTooManyWatched)
}

// onlyStatus decodes frames, which must be one status frame.
func onlyStatus(t *testing.T, frames []string) protocol.Status {
	t.Helper()
	require.Len(t, frames, 1)
	var st struct {
		Type string `json:"type"`
		protocol.Status
	}
	require.NoError(t, json.Unmarshal([]byte(frames[0]), &st))
	require.Equal(t, "status", st.Type)
	return st.Status
}

// A user who went offline has a last-seen time until LastSeenTTL runs out
// on the ring, whether it closed or timed out.
func TestLastSeenIsKeptForItsTTL(t *testing.T) {
	n := newNode(t, Config{Tick: time.Second, LastSeenTTL: 5 * time.Second})
	_, ok := n.lastSeen("bob")
	assert.False(t, ok, "never seen")
	bob := connect(t, n, "bob")
	before := time.Now()
	n.Disconnect(bob)
	seen, ok := n.lastSeen("bob")
	require.True(t, ok)
	assert.WithinRange(t, seen, before.Truncate(time.Millisecond), time.Now())

	carol := connect(t, n, "carol")
	for range 3 { // a 3-slot ring: silent for the timeout
		n.Step()
	}
	require.NotEmpty(t, carol.closes, "carol timed out")
	n.Disconnect(carol) // as the transport does on Close
	_, ok = n.lastSeen("carol")
	assert.True(t, ok, "timed out")

	for range 3 { // 6 steps since bob left: past its 5 s
		n.Step()
	}
	_, ok = n.lastSeen("bob")
	assert.False(t, ok, "forgotten after LastSeenTTL")
	_, ok = n.lastSeen("carol")
	assert.True(t, ok, "3 steps since carol left")

	bob = connect(t, n, "bob")
	n.Disconnect(bob)
	for range 5 {
		n.Step()
	}
	_, ok = n.lastSeen("bob")
	assert.True(t, ok, "a new offline edge starts a new record")
}

func TestHeartbeatLeaseAndChannels(t *testing.T) {
	n := newNode(t, Config{}) // a lease lasts 2 ticks
	obs := connect(t, n, "obs", "lobby")
	obs.take()
	require.NoError(t, n.Heartbeat("hb", []string{"lobby"}))
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":["hb"],"leaves":[]}`}, obs.take())
	require.NoError(t, n.Heartbeat("hb", []string{"lobby"}))
	n.Step()
	n.Step()
	assert.Empty(t, obs.take(), "renewed")
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["hb"]}`}, obs.take())
	conns, err := connsOf(context.Background(), n, "hb")
	require.NoError(t, err)
	assert.Zero(t, conns)
}

func TestGracePeriodHoldsUserAndChannels(t *testing.T) {
	n := newNode(t, Config{Slots: 11, Tick: time.Second, Grace: 2 * time.Second})
	obs := connect(t, n, "obs", "lobby")
	a := connect(t, n, "alice", "lobby")
	require.NoError(t, n.Watch(context.Background(), obs, []string{"alice"}))
	n.Step()
	obs.take()

	n.Disconnect(a)
	n.Step()
	a = connect(t, n, "alice", "lobby") // a reload
	n.Step()
	n.Step()
	n.Step()
	assert.Empty(t, obs.take(), "no flap across a reload within the grace period")

	n.Disconnect(a)
	n.Step()
	n.Step()
	assert.Empty(t, obs.take(), "held for the grace period")
	n.Step()
	assert.ElementsMatch(t, []string{
		`{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}`,
		`{"type":"status","online":[],"offline":["alice"]}`,
	}, obs.take())
}

func TestDeliverGoesOnlyToWhoAsked(t *testing.T) {
	n := newNode(t, Config{})
	a := connect(t, n, "alice", "lobby")
	b := connect(t, n, "bob", "room")
	quiet := connect(t, n, "quiet")
	a.take()
	b.take()
	ctx := context.Background()
	require.NoError(t, n.Chat(ctx, a, "lobby", "hi"))
	assert.ErrorIs(t, n.Chat(ctx, a, "room", "hi"), ErrNotJoined)
	require.NoError(t, n.Publish(ctx, "room", json.RawMessage(`{"n":1}`)))
	require.NoError(t, n.Send(ctx, "alice", json.RawMessage(`"psst"`)))
	assert.Error(t, n.Send(ctx, "alice", json.RawMessage(`{`)))
	assert.Equal(t, []string{
		`{"type":"chat","channel":"lobby","from":"alice","text":"hi"}`,
		`{"type":"message","data":"psst"}`,
	}, a.take())
	assert.Equal(t, []string{`{"type":"publish","channel":"room","data":{"n":1}}`}, b.take())
	n.Step()
	assert.Empty(t, quiet.take())
}

// A model check: random joins, leaves, connects and disconnects of many
// clients over many ticks. Every subscriber's picture, its snapshot plus the
// diffs after it, matches the channel's members at every tick.
func TestSnapshotPlusDiffsNeverMissOrRepeat(t *testing.T) {
	n := newNode(t, Config{MemberList: 1000})
	rng := rand.New(rand.NewPCG(1, 2))
	m := newModel(t, n, rng, 12, "a", "b", "c")
	for tick := range 300 {
		for range rng.IntN(8) {
			switch op := rng.IntN(10); {
			case op < 3 || len(m.live) == 0:
				m.connect()
			case op < 5:
				m.disconnect()
			case op < 8:
				m.join()
			default:
				m.leave()
			}
		}
		m.step()
		for _, s := range m.live {
			for ch := range s.joined {
				_, members, _, err := n.Members(context.Background(), ch, "", 1000)
				require.NoError(t, err)
				require.Equal(t, members, s.members(ch), "tick %d, %s's view of %s", tick, s.c.name, ch)
			}
		}
	}
}

// A model check of the counts: random connects, joins, leaves, disconnects
// and heartbeats of a few users, each with several connections at a time.
// A user is online and a member of a channel exactly while one of its
// connections or its lease is, and counts each of them.
func TestMembersAreTheUsersConnectionsJoined(t *testing.T) {
	n := newNode(t, Config{Slots: 1000}) // no lease ends within the test
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	channels := []string{"a", "b", "c", "d"}
	type conn struct {
		c      *client
		uid    string
		joined []string
	}
	var live []*conn
	leases := map[string][]string{} // uid -> its lease's channels
	for step := range 3000 {
		uid := fmt.Sprintf("u%d", rng.IntN(4))
		ch := channels[rng.IntN(len(channels))]
		switch op := rng.IntN(10); {
		case op < 3 || len(live) == 0:
			c := &conn{c: &client{name: uid}, uid: uid}
			for _, ch := range channels {
				if rng.IntN(3) == 0 {
					c.joined = append(c.joined, ch)
				}
			}
			require.NoError(t, n.Connect(ctx, c.c, uid, c.joined))
			live = append(live, c)
		case op < 5:
			i := rng.IntN(len(live))
			n.Disconnect(live[i].c)
			live = slices.Delete(live, i, i+1)
		case op < 7:
			c := live[rng.IntN(len(live))]
			require.NoError(t, n.Join(ctx, c.c, ch))
			if !slices.Contains(c.joined, ch) {
				c.joined = append(c.joined, ch)
			}
		case op < 9:
			c := live[rng.IntN(len(live))]
			require.NoError(t, n.Leave(c.c, ch))
			c.joined = slices.DeleteFunc(c.joined, func(x string) bool { return x == ch })
		default:
			var chs []string
			for _, ch := range channels {
				if rng.IntN(2) == 0 {
					chs = append(chs, ch)
				}
			}
			require.NoError(t, n.Heartbeat(uid, chs))
			leases[uid] = chs
		}
		conns := map[string]int{}
		members := map[string][]string{}
		join := func(uid string, joined []string) {
			conns[uid]++
			for _, ch := range joined {
				if !slices.Contains(members[ch], uid) {
					members[ch] = append(members[ch], uid)
				}
			}
		}
		for _, c := range live {
			join(c.uid, c.joined)
		}
		for uid, chs := range leases {
			join(uid, chs)
		}
		for i := range 4 {
			uid := fmt.Sprintf("u%d", i)
			got, err := connsOf(ctx, n, uid)
			require.NoError(t, err)
			require.Equal(t, conns[uid], got, "step %d: connections of %s", step, uid)
		}
		for _, ch := range channels {
			_, got, _, err := n.Members(ctx, ch, "", 10)
			require.NoError(t, err)
			want := members[ch]
			slices.Sort(want)
			require.Equal(t, orEmpty(want), got, "step %d: members of %s", step, ch)
		}
	}
}

// After a stall of the clock, a lease and a grace period that end get two
// more ticks, once, for the heartbeats and reconnections that waited.
func TestLeasesAndGracesOutliveAStall(t *testing.T) {
	var stalled time.Time
	n := newNode(t, Config{Slots: 3, Tick: time.Second, Grace: time.Second})
	n.stalled = func() time.Time { return stalled }
	obs := connect(t, n, "obs")
	require.NoError(t, n.Watch(context.Background(), obs, []string{"hb", "gone"}))
	require.NoError(t, n.Heartbeat("hb", nil))
	n.Disconnect(connect(t, n, "gone"))
	n.Step()
	obs.take()
	stalled = time.Now()
	n.Step()
	n.Step() // both would end here
	assert.Empty(t, obs.take())
	require.NoError(t, n.Heartbeat("hb", nil)) // the heartbeat that waited
	n.Step()
	n.Step()
	n.Step() // the grace period, put off once, ends
	assert.Equal(t, []string{`{"type":"status","online":[],"offline":["gone"]}`}, obs.take())
	n.Step()
	n.Step()
	assert.Equal(t, []string{`{"type":"status","online":[],"offline":["hb"]}`}, obs.take(), "the renewed lease ends, no second reprieve")
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// connsOf is uid's live connections on every node, as n knows them.
func connsOf(ctx context.Context, n *Node, uid string) (int, error) {
	st, err := n.Status(ctx, uid)
	return st.Conns, err
}
