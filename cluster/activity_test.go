package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// madeAcross returns the edges of uid that the nodes made, each node's in
// its order, as "kind uid [channel]".
func madeAcross(uid string, nodes ...*node) []string {
	var out []string
	for _, n := range nodes {
		for _, e := range n.rec.madeEdges() {
			if f := splitEdge(e); f[1] == uid {
				out = append(out, e)
			}
		}
	}
	return out
}

// splitEdge returns an edge's kind, uid and channel ("" for a user's).
func splitEdge(e string) []string {
	return append(strings.Fields(e), "")
}

func countEdges(edges []string, want string) int {
	n := 0
	for _, e := range edges {
		if e == want {
			n++
		}
	}
	return n
}

// A user with a connection on each of two nodes is away only while both
// nodes say all their connections are away; each away and active edge is
// relayed to every follower and produced once cluster-wide.
func TestUserActivityAcrossNodes(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	c := startNode(t, testConfig(srv.client(t), "c"))
	ctx := context.Background()
	for _, n := range []*node{a, b, c} {
		n.follow(t, "alice")
	}
	a.SetUser("alice", 1, 0)
	b.SetUser("alice", 1, 0)
	status := func(want presence.UserStatus, what string) {
		t.Helper()
		eventually(t, what, func(ct *assert.CollectT) {
			st, err := c.Status(ctx, "alice")
			require.NoError(ct, err)
			assert.Equal(ct, want, st)
		})
	}
	status(presence.UserStatus{Conns: 2}, "two active connections")

	a.SetUser("alice", 1, 1)
	status(presence.UserStatus{Conns: 2}, "b's connection keeps alice active") // a's away count is in
	eventually(t, "a's away connection counted", func(ct *assert.CollectT) {
		n, err := srv.client(t).HGet(ctx, a.keys[a.shard("alice")].tag+":away", "alice").Int()
		assert.NoError(ct, err)
		assert.Equal(ct, 1, n)
	})
	b.SetUser("alice", 1, 1)
	status(presence.UserStatus{Conns: 2, Away: true}, "both nodes away")
	for _, n := range []*node{a, b, c} {
		n.rec.waitFor(t, testWait, "alice away on "+n.Node(), func() bool { return len(n.rec.activityOf("alice")) == 1 })
	}
	a.SetUser("alice", 1, 0)
	for _, n := range []*node{a, b, c} {
		n.rec.waitFor(t, testWait, "alice active on "+n.Node(), func() bool { return len(n.rec.activityOf("alice")) == 2 })
		assert.Equal(t, []string{"away", "active"}, n.rec.activityOf("alice"), "on %s", n.Node())
	}
	eventually(t, "alice's edges made", func(ct *assert.CollectT) {
		made := madeAcross("alice", a, b, c)
		assert.Equal(ct, 1, countEdges(made, "online alice"), "%v", made)
		assert.Equal(ct, 1, countEdges(made, "away alice"), "%v", made)
		assert.Equal(ct, 1, countEdges(made, "active alice"), "%v", made)
		assert.Equal(ct, 1, countEdges(madeAcross("alice", b), "away alice"), "b's write made alice away")
	})

	// A user who arrives away: online, then away. Going offline away makes
	// no active edge.
	c.follow(t, "bob")
	a.SetUser("bob", 2, 2)
	a.rec.waitFor(t, testWait, "bob's edges made", func() bool { return len(madeAcross("bob", a)) == 2 })
	assert.Equal(t, []string{"online bob", "away bob"}, madeAcross("bob", a))
	c.rec.waitFor(t, testWait, "bob away on c", func() bool { return len(c.rec.activityOf("bob")) == 1 })
	assert.Equal(t, []string{"away"}, c.rec.activityOf("bob"))
	a.SetUser("bob", 0, 0)
	a.rec.waitFor(t, testWait, "bob offline", func() bool { return len(madeAcross("bob", a)) == 3 })
	assert.Equal(t, []string{"online bob", "away bob", "offline bob"}, madeAcross("bob", a, b, c))

	// A follower that comes later reads alice's activity in its snapshot.
	b.SetUser("alice", 1, 1)
	a.SetUser("alice", 1, 1)
	status(presence.UserStatus{Conns: 2, Away: true}, "alice away again")
	d := startNode(t, testConfig(srv.client(t), "d"))
	d.follow(t, "alice")
	assert.Equal(t, []string{"away"}, d.rec.activityOf("alice"), "the snapshot says away")
}

// A member is away in a channel while every node holding the membership
// says so; a node that follows the channel elsewhere gets the edges in
// order with the joins and leaves, and its snapshot lists who is away.
func TestMemberActivityAcrossNodes(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	o := startNode(t, testConfig(srv.client(t), "o"))
	o.follow(t, "#lobby")
	edges := func(uid string, want ...string) {
		t.Helper()
		o.rec.waitFor(t, testWait, "lobby edges of "+uid, func() bool { return len(o.rec.joinEdges("lobby", uid)) >= len(want) })
		assert.Equal(t, want, o.rec.joinEdges("lobby", uid))
	}

	a.SetMember("lobby", "alice", 1, false)
	edges("alice", "+")
	a.SetMember("lobby", "alice", 1, true)
	edges("alice", "+", "away")
	b.SetMember("lobby", "alice", 2, false) // b's connections are active
	edges("alice", "+", "away", "active")
	b.SetMember("lobby", "alice", 2, true)
	edges("alice", "+", "away", "active", "away")
	b.SetMember("lobby", "alice", 0, false) // a still says away
	a.SetMember("lobby", "bob", 1, true)    // joins already away
	edges("bob", "+", "away")
	assert.Equal(t, []string{"+", "away", "active", "away"}, o.rec.joinEdges("lobby", "alice"), "b leaving changes nothing")

	a.SetMember("lobby", "carol", 1, false)
	edges("carol", "+")
	n := startNode(t, testConfig(srv.client(t), "n"))
	n.follow(t, "#lobby")
	assert.Equal(t, []string{"alice", "bob", "carol"}, n.rec.membersOf("lobby"))
	_, snap := n.rec.awayOf("lobby")
	assert.Equal(t, []string{"alice", "bob"}, snap, "the snapshot's away list")

	// A leave takes the activity with it; no active edge.
	a.SetMember("lobby", "alice", 0, false)
	edges("alice", "+", "away", "active", "away", "-")
	now, _ := o.rec.awayOf("lobby")
	assert.Equal(t, []string{"bob"}, now)
	joins := 0
	for _, e := range madeAcross("alice", a, b, o) {
		if splitEdge(e)[0] == "join" {
			joins++
		}
	}
	assert.Equal(t, 1, joins, "alice's join is made once")
}

// A user who connects, joins, leaves and goes: the edges are made in the
// order they happened, once, on the node whose changes made them, with the
// Redis clock's times.
func TestProducedEdgeOrder(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	// Users and channels spread over the shards, so the user's records and
	// its membership are written by calls on different shards.
	uids := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	for _, uid := range uids {
		a.SetUser(uid, 1, 0)
		a.SetMember("room-"+uid, uid, 1, false)
	}
	for _, uid := range uids {
		a.rec.waitFor(t, testWait, uid+" joined", func() bool { return len(madeAcross(uid, a)) == 2 })
	}
	for _, uid := range uids {
		a.SetMember("room-"+uid, uid, 0, false)
		a.SetUser(uid, 0, 0)
	}
	for _, uid := range uids {
		a.rec.waitFor(t, testWait, uid+" gone", func() bool { return len(madeAcross(uid, a)) == 4 })
		ch := "room-" + uid
		assert.Equal(t, []string{"online " + uid, "join " + uid + " " + ch, "leave " + uid + " " + ch, "offline " + uid},
			madeAcross(uid, a, b))
	}
	on, ok := a.rec.madeAt(presence.EdgeOnline, "u0")
	require.True(t, ok)
	off, _ := a.rec.madeAt(presence.EdgeOffline, "u0")
	assert.False(t, off.Before(on), "offline at %v, online at %v", off, on)
	assert.WithinDuration(t, time.Now(), off, time.Minute, "edges carry the Redis clock's time")
}

// A tab that connects and closes before the node's next write round is
// written in order all the same: the node makes every edge of the flap, and
// its own Relay, told of the arrival at once, hears the departure too.
func TestFlapWithinOneRoundIsWritten(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	uids := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	names := append([]string{"#lobby"}, uids...)
	a.follow(t, names...)
	b.follow(t, names...)
	for _, uid := range uids { // back to back: no write round between them
		a.SetUser(uid, 1, 0)
		a.SetMember("lobby", uid, 1, false)
		a.SetMember("lobby", uid, 0, false)
		a.SetUser(uid, 0, 0)
	}
	for _, uid := range uids {
		a.rec.waitFor(t, testWait, uid+" flapped", func() bool { return len(madeAcross(uid, a)) == 4 })
		assert.Equal(t, []string{"online " + uid, "join " + uid + " lobby", "leave " + uid + " lobby", "offline " + uid},
			madeAcross(uid, a, b), "made once, by a")
	}
	// b hears the edges over Pub/Sub, maybe well after a made them: wait
	// for all of them. Only then does "nobody left on b" say anything, as
	// nobody is left on a b that has heard nothing yet.
	for _, uid := range uids { // b hears both edges, not a netted nothing
		eventually(t, "b heard "+uid+"'s flap", func(c *assert.CollectT) {
			assert.Equal(c, []string{"+", "-"}, b.rec.joinEdges("lobby", uid), "%s's lobby edges on b", uid)
			assert.Equal(c, 1, b.rec.count(uid, true), "%s's online edges on b", uid)
			assert.Equal(c, 1, b.rec.count(uid, false), "%s's offline edges on b", uid)
		})
	}
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "nobody left on "+n.Node(), func() bool {
			n.rec.mu.Lock()
			defer n.rec.mu.Unlock()
			for _, uid := range uids {
				if n.rec.online[uid] {
					return false
				}
			}
			return len(n.rec.members["lobby"]) == 0
		})
	}
}

// Last seen is recorded in Redis with each offline edge, by the node that
// made it (the claimer for a crashed node), and read on any node.
func TestLastSeenInRedis(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	c := startNode(t, testConfig(srv.client(t), "c"))
	ctx := context.Background()

	a.SetUser("alice", 1, 0)
	b.SetUser("bob", 1, 1)
	for _, uid := range []string{"alice", "bob"} {
		eventually(t, uid+" online", func(ct *assert.CollectT) {
			st, err := c.Status(ctx, uid)
			require.NoError(ct, err)
			assert.Equal(ct, 1, st.Conns)
			assert.True(ct, st.LastSeen.IsZero())
		})
	}
	a.SetUser("alice", 0, 0)
	a.rec.waitFor(t, testWait, "alice offline", func() bool { _, ok := a.rec.madeAt(presence.EdgeOffline, "alice"); return ok })
	at, _ := a.rec.madeAt(presence.EdgeOffline, "alice")
	st, err := c.Status(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, presence.UserStatus{LastSeen: at}, st)

	// b dies with bob on it: whoever claims b records bob's last seen, b's
	// last proof of life (its last renewal), before the offline edge made a
	// lease later.
	start := time.Now()
	b.crash()
	stopped := time.Now()
	var claimer *node
	eventually(t, "bob reaped", func(ct *assert.CollectT) {
		claimer = nil
		for _, n := range []*node{a, c} {
			if _, ok := n.rec.madeAt(presence.EdgeOffline, "bob"); ok {
				claimer = n
			}
		}
		assert.NotNil(ct, claimer)
	})
	t.Logf("bob reaped by %s %v after b crashed", claimer.Node(), time.Since(start).Round(time.Millisecond))
	at, _ = claimer.rec.madeAt(presence.EdgeOffline, "bob")
	d := startNode(t, testConfig(srv.client(t), "d"))
	st, err = d.Status(ctx, "bob")
	require.NoError(t, err)
	assert.False(t, st.LastSeen.After(stopped), "bob last seen %v after b's last call", st.LastSeen.Sub(stopped))
	assert.True(t, st.LastSeen.Before(at), "bob last seen at the claim (%v), not at b's last renewal", at)
	assert.Greater(t, st.LastSeen, start.Add(-2*testTimeout), "bob last seen long before b crashed")
	assert.Equal(t, presence.UserStatus{LastSeen: st.LastSeen}, st, "no active edge and no away once offline")
	assert.Equal(t, 1, countEdges(madeAcross("bob", a, c), "offline bob"))
	assert.Zero(t, countEdges(madeAcross("bob", a, c), "active bob"), "going offline away is no active edge")

	// Back online: no last seen while online.
	a.SetUser("alice", 1, 0)
	eventually(t, "alice back", func(ct *assert.CollectT) {
		st, err := d.Status(ctx, "alice")
		require.NoError(ct, err)
		assert.Equal(ct, presence.UserStatus{Conns: 1}, st)
	})
}

// Last-seen records older than the TTL are not reported, and later offline
// edges trim them from Redis.
func TestLastSeenTTLTrims(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.client(t)
	cfg := testConfig(rdb, "a")
	cfg.LastSeenTTL = 300 * time.Millisecond
	a := startNode(t, cfg)
	ctx := context.Background()
	k := a.keys[0]
	var uids []string // users of shard 0, so one set holds them all
	for i := 0; len(uids) < 3; i++ {
		if uid := "u" + string(rune('a'+i)); a.shard(uid) == 0 {
			uids = append(uids, uid)
		}
	}
	off := func(uid string) {
		t.Helper()
		a.SetUser(uid, 0, 0)
		eventually(t, uid+" recorded", func(ct *assert.CollectT) {
			_, err := rdb.ZScore(ctx, k.tag+":seen", uid).Result()
			assert.NoError(ct, err)
		})
	}
	// Written apart, so each makes its own edges.
	a.SetUser(uids[0], 1, 0)
	eventually(t, "online", func(ct *assert.CollectT) {
		st, err := a.Status(ctx, uids[0])
		require.NoError(ct, err)
		assert.Equal(ct, 1, st.Conns)
	})
	off(uids[0])
	eventually(t, "past the TTL", func(ct *assert.CollectT) {
		st, err := a.Status(ctx, uids[0])
		require.NoError(ct, err)
		assert.True(ct, st.LastSeen.IsZero())
	})
	n, err := rdb.ZCard(ctx, k.tag+":seen").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "kept until an offline edge trims it")

	a.SetUser(uids[1], 1, 0)
	eventually(t, "online", func(ct *assert.CollectT) {
		st, err := a.Status(ctx, uids[1])
		require.NoError(ct, err)
		assert.Equal(ct, 1, st.Conns)
	})
	off(uids[1])
	seen, err := rdb.ZRange(ctx, k.tag+":seen", 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{uids[1]}, seen, "the expired record is trimmed")
}

func TestLastSeenTTLValidated(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(srv.client(t), "a")
	cfg.LastSeenTTL = -time.Second
	_, err := New(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "LastSeenTTL")
	cfg.LastSeenTTL = 0
	e, err := New(cfg)
	require.NoError(t, err)
	defer e.crash()
	assert.Equal(t, presence.DefaultLastSeenTTL, e.cfg.LastSeenTTL)
}
