package cluster

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// A topic unfollowed and followed again within a renewal interval keeps its
// subscription and state: no new snapshot. One nobody follows for longer is
// dropped from the Relay and no longer heard of; followed again, it is
// subscribed again and its state read anew.
func TestUnfollowKeepsTheTopicForARenewal(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	a.follow(t, "#room")
	require.Equal(t, 1, a.rec.setsOf("room"), "the first snapshot")

	a.Unfollow(topics("#room"))
	a.follow(t, "#room")
	b.SetUser("bob", 1, 0)
	b.SetMember("room", "bob", 1, false)
	a.rec.waitFor(t, testWait, "bob joins, on a", func() bool { return len(a.rec.membersOf("room")) == 1 })
	assert.Equal(t, 1, a.rec.setsOf("room"), "followed again at once: no new snapshot")

	a.Unfollow(topics("#room"))
	a.rec.waitFor(t, testWait, "room dropped from the Relay", func() bool { return a.rec.setsOf("room") == 2 })
	assert.Empty(t, a.rec.membersOf("room"))
	b.SetMember("room", "carol", 1, false)
	eventually(t, "carol's membership written", func(c *assert.CollectT) {
		count, _, err := b.Members(context.Background(), "room", "", 0)
		assert.NoError(c, err)
		assert.Equal(c, 2, count)
	})
	time.Sleep(testRenew) // give a stray edge a chance to show up
	assert.Equal(t, []string{"room bob +"}, a.rec.joins, "nothing heard of a dropped topic")

	a.follow(t, "#room")
	assert.Equal(t, 3, a.rec.setsOf("room"), "a new snapshot")
	assert.Equal(t, []string{"bob", "carol"}, a.rec.membersOf("room"))
	b.SetMember("room", "dave", 1, false)
	a.rec.waitFor(t, testWait, "dave joins, on a", func() bool { return len(a.rec.membersOf("room")) == 3 })
}

// A node's own user or membership is in the Relay when SetUser or SetMember
// returns, for a topic whose state the Relay has: a Node counts a new
// connection in the snapshots it sends right after.
func TestOwnEdgeInTheRelayOnReturn(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	a.follow(t, "#room")
	for i := range 20 {
		uid := "u" + strconv.Itoa(i)
		a.follow(t, uid)
		a.SetUser(uid, 1, 0)
		a.SetMember("room", uid, 1, false)
		assert.Equal(t, 1, a.rec.count(uid, true), "%s online on return", uid)
		assert.Contains(t, a.rec.membersOf("room"), uid, "%s in the room on return", uid)
	}
}

// blockingRelay holds the Relay's EventUser for one user until released,
// as a slow Relay would.
type blockingRelay struct {
	*recorder
	uid     string
	entered chan struct{}
	release chan struct{}
}

func (r *blockingRelay) Receive(e presence.Event) {
	if e.Kind == presence.EventUser && e.UID == r.uid {
		r.entered <- struct{}{}
		<-r.release
	}
	r.recorder.Receive(e)
}

// A Relay call in progress holds no lock of the engine: other shards'
// snapshots and edges, and the node's own changes, go on meanwhile.
func TestSlowRelayHoldsUpNoOtherShard(t *testing.T) {
	srv := startRedis(t)
	relay := &blockingRelay{uid: "slow", entered: make(chan struct{}, 1), release: make(chan struct{})}
	a := startNodeRelay(t, testConfig(srv.client(t), "a"), func(_ *Engine, rec *recorder) presence.Relay {
		relay.recorder = rec
		return relay
	})
	b := startNode(t, testConfig(srv.client(t), "b"))
	// Names in other shards than slow's.
	var room, fast string
	for i := 0; room == "" || fast == ""; i++ {
		name := "x" + strconv.Itoa(i)
		if a.shard(name) == a.shard("slow") {
			continue
		}
		if room == "" {
			room = name
		} else if a.shard(name) != a.shard(room) {
			fast = name
		}
	}
	followDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		followDone <- a.Follow(ctx, topics("slow"))
	}()
	select {
	case <-relay.entered: // the snapshot of slow, held
	case <-time.After(testWait):
		t.Fatal("the Relay never got slow's snapshot")
	}

	a.follow(t, "#"+room, fast)
	b.SetUser(fast, 1, 0)
	b.SetMember(room, fast, 1, false)
	a.rec.waitFor(t, testWait, "edges of other shards", func() bool {
		return a.rec.count(fast, true) == 1 && len(a.rec.membersOf(room)) == 1
	})
	setDone := make(chan struct{})
	go func() {
		a.SetUser("other", 1, 0)
		a.SetMember(room, "other", 1, false)
		close(setDone)
	}()
	select {
	case <-setDone:
	case <-time.After(testWait):
		t.Fatal("SetUser waited for a Relay call of another shard")
	}
	select {
	case err := <-followDone:
		t.Fatalf("Follow returned (%v) before the Relay had the state", err)
	default:
	}
	close(relay.release)
	require.NoError(t, <-followDone)
	assert.Equal(t, 0, a.rec.count("slow", true))
}

// callbackRelay does what a Node does when a disconnect reaches it: it
// closes the user's connections, which tells the engine the new count.
type callbackRelay struct {
	*recorder
	e *Engine
}

func (r *callbackRelay) Receive(e presence.Event) {
	if e.Kind == presence.EventMessage && e.Message.Kind == presence.MessageDisconnect {
		r.e.Apply(presence.Change{Kind: presence.ChangeUser, UID: e.Message.UID, N: 1})
	}
	r.recorder.Receive(e)
}

// A disconnect delivered to the Relay may call back into the engine, on the
// user's own topic, without holding up what follows it.
func TestDisconnectMayCallBack(t *testing.T) {
	srv := startRedis(t)
	a := startNodeRelay(t, testConfig(srv.client(t), "a"), func(e *Engine, rec *recorder) presence.Relay {
		return &callbackRelay{recorder: rec, e: e}
	})
	b := startNode(t, testConfig(srv.client(t), "b"))
	a.follow(t, "bob")
	a.SetUser("bob", 2, 0)
	ctx := context.Background()
	require.NoError(t, b.Publish(ctx, presence.Message{Kind: presence.MessageDisconnect, UID: "bob"}))
	require.NoError(t, b.Publish(ctx, presence.Message{UID: "bob", Frame: encoded("message", `{"type":"message"}`)}))
	a.rec.waitFor(t, testWait, "the disconnect and the message after it", func() bool {
		a.rec.mu.Lock()
		defer a.rec.mu.Unlock()
		return len(a.rec.chats) == 2
	})
	eventually(t, "bob down to 1 connection", func(c *assert.CollectT) {
		n, err := connsOf(ctx, b, "bob")
		assert.NoError(c, err)
		assert.Equal(c, 1, n)
	})
}
