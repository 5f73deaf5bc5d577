package presence

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// A user is away only while every one of its connections is: one tab away
// is no edge, the second is, and either coming back is.
func TestAwayIsPerUserOverItsConnections(t *testing.T) {
	n := newNode(t, Config{})
	ctx := context.Background()
	obs := connect(t, n, "obs", "lobby")
	require.NoError(t, n.Watch(ctx, obs, []string{"alice"}))
	tab1 := connect(t, n, "alice", "lobby")
	tab2 := connect(t, n, "alice", "lobby")
	n.Step()
	obs.take()

	require.NoError(t, n.SetActivity(tab1, true))
	n.Step()
	assert.Empty(t, obs.take(), "the other tab is active")
	st, err := n.Status(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, UserStatus{Conns: 2}, st)

	require.NoError(t, n.SetActivity(tab2, true))
	n.Step()
	assert.ElementsMatch(t, []string{
		`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"away":["alice"]}`,
		`{"type":"status","online":[],"offline":[],"away":["alice"]}`,
	}, obs.take())
	st, err = n.Status(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, UserStatus{Conns: 2, Away: true}, st)

	// Snapshots say who is away.
	late := connect(t, n, "late", "lobby")
	require.NoError(t, n.Watch(ctx, late, []string{"alice", "obs"}))
	assert.Equal(t, []string{
		`{"type":"joined","channel":"lobby","count":3,"members":["alice","late","obs"],"away":["alice"]}`,
		`{"type":"watching","online":["alice","obs"],"away":["alice"]}`,
	}, late.take())

	require.NoError(t, n.Chat(ctx, tab1, "lobby", "back"))
	n.Step()
	frames := obs.take()
	assert.Contains(t, frames, `{"type":"presence","channel":"lobby","count":3,"joins":["late"],"leaves":[],"active":["alice"]}`)
	assert.Contains(t, frames, `{"type":"status","online":[],"offline":[],"active":["alice"]}`)

	// The away tab closing leaves the active one: no edge. Then the last
	// one goes away and closes: offline, with no active edge.
	n.Disconnect(tab2)
	require.NoError(t, n.SetActivity(tab1, true))
	n.Step()
	assert.Contains(t, obs.take(), `{"type":"presence","channel":"lobby","count":3,"joins":[],"leaves":[],"away":["alice"]}`)
	n.Disconnect(tab1)
	n.Step()
	assert.Equal(t, []string{
		`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":["alice"]}`,
		`{"type":"status","online":[],"offline":["alice"]}`,
	}, obs.take())
}

// An active connection with no activity, chat, typing or join frame for
// AwayAfter turns away on the clock; a keepalive does not count, and a join
// does not bring an away connection back.
func TestAwayAfterMarksSilentConnectionsAway(t *testing.T) {
	n := newNode(t, Config{Slots: 31, Tick: time.Second, AwayAfter: 3 * time.Second})
	ctx := context.Background()
	obs := connect(t, n, "obs", "lobby")
	bob := connect(t, n, "bob", "lobby")
	n.Step()
	obs.take()
	for range 2 {
		n.Touch(bob)
		n.Touch(obs)
		n.Step()
	}
	assert.Empty(t, obs.take(), "still within AwayAfter")
	n.Touch(bob)
	n.Step() // ceil(3s/1s)+1 steps after the connect: between 3 s and 4 s
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"away":["bob","obs"]}`}, obs.take())

	require.NoError(t, n.Join(ctx, bob, "room"))
	n.Step()
	assert.Empty(t, obs.take(), "a join leaves an away connection away")
	require.NoError(t, n.SetActivity(bob, false))
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"active":["bob"]}`}, obs.take())
	for range 2 {
		n.Step()
	}
	assert.Empty(t, obs.take(), "an active frame renews the deadline")
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"away":["bob"]}`}, obs.take())

	// A join renews an active connection's deadline.
	require.NoError(t, n.SetActivity(bob, false))
	n.Step()
	n.Step()
	obs.take()
	require.NoError(t, n.Join(ctx, bob, "room2"))
	for range 3 {
		n.Step()
	}
	assert.Empty(t, obs.take(), "a join renews the deadline")
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"away":["bob"]}`}, obs.take())
}

// A user who joins a channel already away is in the diff's joins and away
// lists; one who goes away and back within a tick is in neither.
func TestActivityIsNettedPerTick(t *testing.T) {
	n := newNode(t, Config{})
	obs := connect(t, n, "obs", "lobby", "room")
	carol := connect(t, n, "carol", "lobby")
	n.Step()
	obs.take()
	require.NoError(t, n.SetActivity(carol, true))
	require.NoError(t, n.SetActivity(carol, false))
	require.NoError(t, n.SetActivity(carol, true))
	require.NoError(t, n.SetActivity(carol, false))
	n.Step()
	assert.Empty(t, obs.take(), "away and back within the tick")

	require.NoError(t, n.SetActivity(carol, true))
	n.Step()
	obs.take()
	// A join leaves the connection away.
	require.NoError(t, n.Join(context.Background(), carol, "room"))
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"room","count":2,"joins":["carol"],"leaves":[],"away":["carol"]}`}, obs.take())
}

// OnPresence, OnActivity and OnEdges hear the edges as they happened, not
// netted: a user who connects and leaves within a tick is online, join,
// leave, offline, in one batch.
func TestEdgeCallbacksHearEveryEdgeInOrder(t *testing.T) {
	var mu sync.Mutex
	var calls, batches []string
	n := newNode(t, Config{
		OnPresence: func(uid string, online bool) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, fmt.Sprintf("presence %s %v", uid, online))
		},
		OnActivity: func(uid string, away bool) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, fmt.Sprintf("activity %s %v", uid, away))
		},
		OnEdges: func(edges []Edge) {
			var b []string
			for _, e := range edges {
				assert.False(t, e.At.IsZero())
				b = append(b, e.Kind.String()+" "+e.UID+" "+e.Channel)
			}
			mu.Lock()
			defer mu.Unlock()
			batches = append(batches, fmt.Sprint(b))
		},
	})
	dave := connect(t, n, "dave", "lobby")
	n.Disconnect(dave)
	n.Step()
	erin := connect(t, n, "erin", "lobby")
	require.NoError(t, n.SetActivity(erin, true))
	n.Step()
	require.NoError(t, n.SetActivity(erin, false))
	n.Step()
	n.Step() // no edges: no batch
	n.Close()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		"presence dave true", "presence dave false",
		"presence erin true", "activity erin true", "activity erin false",
	}, calls)
	assert.Equal(t, []string{
		"[online dave  join dave lobby leave dave lobby offline dave ]",
		"[online erin  join erin lobby away erin ]",
		"[active erin ]",
	}, batches)
}

// A model check of activity: random connects, disconnects, joins, leaves
// and activity changes; every client's picture, built from its snapshots
// and diffs, says exactly who of each channel's members is away.
func TestSnapshotPlusDiffsKeepAwayExact(t *testing.T) {
	n := newNode(t, Config{MemberList: 1000})
	rng := rand.New(rand.NewPCG(3, 4))
	m := newModel(t, n, rng, 8, "a", "b")
	for tick := range 300 {
		for range rng.IntN(8) {
			switch op := rng.IntN(12); {
			case op < 3 || len(m.live) == 0:
				m.connect()
			case op < 4:
				m.disconnect()
			case op < 6:
				m.join()
			case op < 7:
				m.leave()
			default:
				m.setActivity()
			}
		}
		m.step()
		for _, s := range m.live {
			for ch := range s.joined {
				require.Equal(t, m.truth(ch), s.view[ch], "tick %d, %s's view of %s", tick, s.c.name, ch)
			}
		}
	}
}

// countingClient counts the frames it is sent.
type countingClient struct{ frames int }

func (c *countingClient) Send(protocol.Encoded) { c.frames++ }
func (c *countingClient) Probe()                {}
func (c *countingClient) Close(int, string)     {}

// An away storm (every member of a channel turns away in one tick) costs
// one diff per member connection, encoded once: O(members), coalesced.
func TestAwayStormCostsOneFramePerMember(t *testing.T) {
	for _, size := range []int{50, 5000} {
		n := newNode(t, Config{PresenceLists: 10_000})
		var clients []*countingClient
		for i := range size {
			c := &countingClient{}
			require.NoError(t, n.Connect(context.Background(), c, fmt.Sprintf("u%05d", i), []string{"room"}))
			clients = append(clients, c)
			if i%100 == 99 {
				n.Step() // a join storm of 5,000 in one tick costs O(n²) to set up
			}
		}
		n.Step()
		frames := func() int {
			sum := 0
			for _, c := range clients {
				sum += c.frames
				c.frames = 0
			}
			return sum
		}
		frames()
		for _, c := range clients {
			require.NoError(t, n.SetActivity(c, true))
		}
		n.Step()
		got := frames()
		assert.Equal(t, size, got, "one diff per member")
		for _, c := range clients {
			require.NoError(t, n.SetActivity(c, false))
		}
		n.Step()
		assert.Equal(t, size, frames(), "and one when they are back")
		t.Logf("away storm in a channel of %d: %d frames in the tick (%.1f per member)", size, got, float64(got)/float64(size))
	}
}

// What a networked engine delivers: a member who joins already away (its
// away connections are on another node), and one who leaves and comes back
// away within a tick, which is no news to a client that had it away.
func TestActivityFromOtherNodesIsNetted(t *testing.T) {
	n := newNode(t, Config{})
	obs := connect(t, n, "obs", "lobby")
	n.Step()
	obs.take()
	var relay Relay = &n.v // what the Engine calls
	relay.Receive(Event{Kind: EventMember, Channel: "lobby", UID: "zed", On: true})
	relay.Receive(Event{Kind: EventActivity, Channel: "lobby", UID: "zed", On: true})
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":["zed"],"leaves":[],"away":["zed"]}`}, obs.take())

	relay.Receive(Event{Kind: EventMember, Channel: "lobby", UID: "zed", On: false})
	relay.Receive(Event{Kind: EventMember, Channel: "lobby", UID: "zed", On: true})
	relay.Receive(Event{Kind: EventActivity, Channel: "lobby", UID: "zed", On: true})
	n.Step()
	assert.Empty(t, obs.take(), "left and came back away: nothing changed")

	relay.Receive(Event{Kind: EventMembers, Channel: "lobby", Members: []string{"obs", "zed"}}) // a snapshot after an outage: zed is back
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"active":["zed"]}`}, obs.take())
}
