package presence

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

func typing(t *testing.T, n *Node, c *client, channel string) {
	t.Helper()
	require.NoError(t, n.Typing(context.Background(), c, channel))
}

// Typing reaches every member at the next tick, as one frame however many
// typing messages came, and ends TypingTTL (rounded up to ticks) plus at
// most one tick after the last one.
func TestTypingCoalescesAndExpires(t *testing.T) {
	n := newNode(t, Config{Tick: time.Second, TypingTTL: 2 * time.Second})
	alice := connect(t, n, "alice", "lobby")
	bob := connect(t, n, "bob", "lobby")
	carol := connect(t, n, "carol", "lobby")
	n.Step()
	alice.take()
	bob.take()
	carol.take()

	for range 3 {
		typing(t, n, alice, "lobby")
		typing(t, n, bob, "lobby")
	}
	assert.Empty(t, carol.take(), "nothing before the tick")
	n.Step()
	want := `{"type":"typing","channel":"lobby","users":["alice","bob"]}`
	assert.Equal(t, []string{want}, carol.take())
	assert.Equal(t, []string{want}, alice.take(), "the typist's own connections hear it too")
	assert.Equal(t, []string{want}, bob.take())

	// bob types on; alice stops. With a 2 s TTL and a 1 s tick, a deadline
	// set between two steps runs out at the third step after it: between
	// 2 and 3 s later.
	typing(t, n, bob, "lobby")
	n.Step()
	assert.Empty(t, carol.take(), "the set did not change")
	n.Step()
	assert.Equal(t, []string{`{"type":"typing","channel":"lobby","users":["bob"]}`}, carol.take())
	n.Step()
	assert.Equal(t, []string{`{"type":"typing","channel":"lobby","users":[]}`}, carol.take())
	n.Step()
	assert.Empty(t, carol.take())
}

// Chatting in the channel ends typing there at once (in the next tick's
// frame), leaving or going offline too; another channel's typing stays.
func TestTypingEndsOnChatLeaveAndOffline(t *testing.T) {
	n := newNode(t, Config{})
	ctx := context.Background()
	obs := connect(t, n, "obs", "lobby", "room")
	alice := connect(t, n, "alice", "lobby", "room")
	bob := connect(t, n, "bob", "lobby")
	n.Step()
	obs.take()

	typing(t, n, alice, "lobby")
	typing(t, n, alice, "room")
	typing(t, n, bob, "lobby")
	n.Step()
	assert.ElementsMatch(t, []string{
		`{"type":"typing","channel":"lobby","users":["alice","bob"]}`,
		`{"type":"typing","channel":"room","users":["alice"]}`,
	}, obs.take())

	require.NoError(t, n.Chat(ctx, alice, "lobby", "hi"))
	n.Step()
	assert.Equal(t, []string{
		`{"type":"chat","channel":"lobby","from":"alice","text":"hi"}`,
		`{"type":"typing","channel":"lobby","users":["bob"]}`,
	}, obs.take(), "chat ends typing in its channel only")

	require.NoError(t, n.Leave(bob, "lobby"))
	n.Step()
	assert.Equal(t, []string{
		`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":["bob"]}`,
		`{"type":"typing","channel":"lobby","users":[]}`,
	}, obs.take())

	n.Disconnect(alice)
	n.Step()
	assert.Equal(t, []string{
		`{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}`,
		`{"type":"presence","channel":"room","count":1,"joins":[],"leaves":["alice"]}`,
		`{"type":"typing","channel":"room","users":[]}`,
	}, obs.take())
}

// A typist who stops and starts again within one tick changes nothing its
// members would be told: no frame.
func TestTypingUnchangedWithinATickSendsNothing(t *testing.T) {
	n := newNode(t, Config{})
	obs := connect(t, n, "obs", "lobby")
	alice := connect(t, n, "alice", "lobby")
	typing(t, n, alice, "lobby")
	n.Step()
	obs.take()
	require.NoError(t, n.Chat(context.Background(), alice, "lobby", "hi"))
	typing(t, n, alice, "lobby")
	n.Step()
	assert.Equal(t, []string{`{"type":"chat","channel":"lobby","from":"alice","text":"hi"}`}, obs.take())
}

func TestTypingNeedsTheChannel(t *testing.T) {
	n := newNode(t, Config{})
	alice := connect(t, n, "alice", "lobby")
	assert.ErrorIs(t, n.Typing(context.Background(), alice, "room"), ErrNotJoined)
	assert.ErrorIs(t, n.Typing(context.Background(), &client{}, "lobby"), ErrNotJoined)
}

// A joined snapshot is followed by who types there now; with more than
// MaxTypingListed typists the frame lists the first ten and counts them all.
func TestTypingSnapshotAndLongLists(t *testing.T) {
	n := newNode(t, Config{})
	var typists []*client
	for i := range 12 {
		typists = append(typists, connect(t, n, fmt.Sprintf("u%02d", i), "lobby"))
	}
	for _, c := range typists {
		typing(t, n, c, "lobby")
	}
	ten := `["u00","u01","u02","u03","u04","u05","u06","u07","u08","u09"]`
	dave := connect(t, n, "dave", "lobby")
	frames := dave.take()
	require.Len(t, frames, 2)
	assert.Contains(t, frames[0], `"type":"joined"`)
	assert.Equal(t, `{"type":"typing","channel":"lobby","users":`+ten+`,"count":12}`, frames[1])

	n.Step()
	frames = typists[11].take()
	require.Len(t, frames, 3, "joined, a presence diff, a typing frame")
	assert.Equal(t, `{"type":"typing","channel":"lobby","users":`+ten+`,"count":12}`, frames[2])

	require.NoError(t, n.Chat(context.Background(), typists[11], "lobby", "done"))
	n.Step()
	assert.Equal(t, []string{
		`{"type":"chat","channel":"lobby","from":"u11","text":"done"}`,
		`{"type":"typing","channel":"lobby","users":` + ten + `,"count":11}`,
	}, dave.take())

	// A member who joins while nobody types gets no typing frame.
	n2 := newNode(t, Config{})
	connect(t, n2, "alice", "lobby")
	assert.Len(t, connect(t, n2, "bob", "lobby").take(), 1)
}

// Typing is never presence: no edges for the embedder or webhooks.
func TestTypingIsNoEdge(t *testing.T) {
	edges := make(chan []Edge, 16)
	n := newNode(t, Config{OnEdges: func(e []Edge) { edges <- e }})
	alice := connect(t, n, "alice", "lobby")
	n.Step()
	next := func() []Edge {
		select {
		case e := <-edges:
			return e
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no edges")
			return nil
		}
	}
	assert.Len(t, next(), 2, "alice online and joined")
	typing(t, n, alice, "lobby")
	n.Step()
	connect(t, n, "bob")
	n.Step()
	// Batches come in order: the typing's tick had none.
	got := next()
	require.Len(t, got, 1)
	assert.Equal(t, Edge{Kind: EdgeOnline, UID: "bob", At: got[0].At, ID: got[0].ID}, got[0])
	assert.True(t, strings.HasSuffix(got[0].ID, "_3"), "the log's third edge: typing made none (%s)", got[0].ID)
}

// counter is a Client that counts the typing frames it gets.
type counter struct{ typing atomic.Int64 }

func (c *counter) Send(f protocol.Encoded) {
	if f.Type == "typing" {
		c.typing.Add(1)
	}
}
func (c *counter) Probe()            {}
func (c *counter) Close(int, string) {}

// Frames per typing burst: 50 users typing at once in channels of 50 and of
// 5,000 members cost one frame per member per tick, however many typing
// messages came. Logged with the step's time, not asserted on it.
func TestTypingBurstFrames(t *testing.T) {
	for _, members := range []int{50, 5000} {
		n := newNode(t, Config{})
		ctx := context.Background()
		clients := make([]*counter, members)
		for i := range clients {
			clients[i] = &counter{}
			require.NoError(t, n.Connect(ctx, clients[i], fmt.Sprintf("u%05d", i), []string{"big"}))
		}
		n.Step()
		const typists, each = 50, 3
		for range each {
			for _, c := range clients[:typists] {
				require.NoError(t, n.Typing(ctx, c, "big"))
			}
		}
		start := time.Now()
		n.Step()
		took := time.Since(start)
		var frames int64
		for _, c := range clients {
			assert.Equal(t, int64(1), c.typing.Load())
			frames += c.typing.Load()
		}
		assert.Equal(t, int64(members), frames)
		t.Logf("%d typists x %d typing frames in a channel of %d: %d typing frames in one tick (step took %v)",
			typists, each, members, frames, took)
	}
}
