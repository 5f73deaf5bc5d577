package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

func TestNewRejectsBadConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no client", Config{}, "Client is nil"},
		{"pipe in node", Config{Client: c, Node: "a|b"}, "contains '|'"},
		{"brace in prefix", Config{Client: c, Prefix: "x{"}, "brace"},
		{"negative shards", Config{Client: c, Shards: -1}, "Shards"},
		{"tiny timeout", Config{Client: c, Timeout: time.Millisecond}, "too short"},
		{"renew too slow", Config{Client: c, Timeout: time.Second, RenewEvery: time.Second}, "RenewEvery"},
		{"negative claim", Config{Client: c, ClaimEvery: -1}, "ClaimEvery"},
		{"claims too rare", Config{Client: c, Timeout: time.Second, ClaimEvery: 300 * time.Millisecond}, "ClaimEvery"},
		{"negative batch", Config{Client: c, Batch: -1}, "Batch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.cfg)
			require.Error(t, err)
			assert.Nil(t, e)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestNewDefaults(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	e, err := New(Config{Client: c})
	require.NoError(t, err)
	defer e.crash()
	assert.NotEmpty(t, e.Node())
	assert.Equal(t, 16, len(e.keys))
	assert.Equal(t, 30*time.Second, e.cfg.Timeout)
	assert.Equal(t, 10*time.Second, e.cfg.RenewEvery)
	assert.Equal(t, 5*time.Second, e.cfg.ClaimEvery)
	assert.Equal(t, "{presenced:3}:alive", e.keys[3].alive)
}

func TestCrossNodeOnlineOffline(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	ctx := context.Background()
	a.follow(t, "alice")
	b.follow(t, "alice")

	a.SetUser("alice", 1, 0)
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "alice online on "+n.Node(), func() bool { return n.rec.count("alice", true) == 1 })
	}
	conns, err := connsOf(ctx, b, "alice")
	require.NoError(t, err)
	assert.Equal(t, 1, conns)

	// A second node and more tabs: connections add up, no new edge.
	b.SetUser("alice", 2, 0)
	a.rec.waitFor(t, testWait, "alice has 3 connections", func() bool {
		n, err := connsOf(ctx, a, "alice")
		return err == nil && n == 3
	})
	count, users, err := a.Users(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
	assert.Equal(t, []string{"alice"}, users)

	// Leaving node a keeps alice online through node b.
	a.SetUser("alice", 0, 0)
	b.rec.waitFor(t, testWait, "alice down to 2 connections", func() bool {
		n, err := connsOf(ctx, b, "alice")
		return err == nil && n == 2
	})
	b.SetUser("alice", 0, 0)
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "alice offline on "+n.Node(), func() bool { return n.rec.count("alice", false) == 1 })
	}
	conns, err = connsOf(ctx, a, "alice")
	require.NoError(t, err)
	assert.Equal(t, 0, conns)
	count, users, err = b.Users(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 0, count)
	assert.Empty(t, users)
	for _, n := range []*node{a, b} {
		assert.Equal(t, 1, n.rec.count("alice", true), "online edges on %s", n.Node())
		assert.Equal(t, 1, n.rec.count("alice", false), "offline edges on %s", n.Node())
	}
	// Each edge was produced once, by the node whose change made it. An edge
	// reaches EventUser over Pub/Sub, and EventProduced only when the node
	// handles its script's reply: wait for that.
	eventually(t, "each edge produced by the node that made it", func(c *assert.CollectT) {
		assert.Equal(c, 1, a.rec.producedCount("alice", true))
		assert.Equal(c, 1, b.rec.producedCount("alice", false))
	})
	assert.Equal(t, 0, b.rec.producedCount("alice", true))
	assert.Equal(t, 0, a.rec.producedCount("alice", false))
}

func TestUsersAcrossShardsInOrder(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	var want []string
	for i := range 40 {
		uid := fmt.Sprintf("u%02d", i)
		want = append(want, uid)
		if i%2 == 0 {
			a.SetUser(uid, 1, 0)
		} else {
			b.SetUser(uid, 1, 0)
		}
	}
	a.rec.waitFor(t, testWait, "40 users online", func() bool {
		count, _, err := a.Users(context.Background(), 0)
		return err == nil && count == 40
	})
	cases := []struct {
		limit int
		want  []string
	}{
		{0, nil},
		{-1, nil},
		{1, want[:1]},
		{7, want[:7]},
		{40, want},
		{100, want},
	}
	for _, tc := range cases {
		count, users, err := b.Users(context.Background(), tc.limit)
		require.NoError(t, err)
		assert.Equal(t, 40, count)
		assert.Equal(t, tc.want, users, "limit %d", tc.limit)
	}
}

func TestPublishReachesEveryNode(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	c := startNode(t, testConfig(srv.client(t), "c")) // follows nothing: hears nothing
	a.follow(t, "#lobby")
	b.follow(t, "#lobby")
	msg := `{"type":"chat","from":"alice","text":"hi"}`
	require.NoError(t, a.Publish(context.Background(), presence.Message{Channel: "lobby", Frame: encoded("chat", msg)}))
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "chat on "+n.Node(), func() bool {
			n.rec.mu.Lock()
			defer n.rec.mu.Unlock()
			return len(n.rec.chats) == 1 && n.rec.chats[0] == msg
		})
	}
	require.NoError(t, a.Publish(context.Background(), presence.Message{UID: "bob", Frame: encoded("message", `{"type":"message"}`)}))
	b.follow(t, "bob")
	require.NoError(t, a.Publish(context.Background(), presence.Message{UID: "bob", Frame: encoded("message", `{"type":"message","n":2}`)}))
	b.rec.waitFor(t, testWait, "message to bob on b", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return len(b.rec.chats) == 2 && b.rec.chats[1] == `{"type":"message","n":2}`
	})
	b.rec.mu.Lock()
	assert.Equal(t, []string{"chat", "message"}, b.rec.types, "each frame's type comes with it")
	b.rec.mu.Unlock()
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	assert.Empty(t, c.rec.chats, "a node that follows nothing")
	assert.Len(t, a.rec.chats, 1, "a does not follow bob")
}

// A user with tabs on two nodes stays online when one node dies.
func TestUserOnTwoNodesSurvivesCrash(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	ctx := context.Background()
	b.follow(t, "bob", "carol")
	a.SetUser("bob", 1, 0)
	b.SetUser("bob", 1, 0)
	a.SetUser("carol", 1, 0) // only on the node that dies: the control
	b.rec.waitFor(t, testWait, "bob has 2 connections", func() bool {
		n, err := connsOf(ctx, b, "bob")
		return err == nil && n == 2
	})
	// a writes in the background: carol may land in a later round than bob.
	b.rec.waitFor(t, testWait, "carol online", func() bool { return b.rec.count("carol", true) == 1 })

	a.crash()
	a.stopRun()
	// carol's offline proves a's leases expired and were claimed.
	b.rec.waitFor(t, testWait, "carol offline", func() bool { return b.rec.count("carol", false) == 1 })
	b.rec.waitFor(t, testWait, "bob's lease on a claimed", func() bool {
		n, err := connsOf(ctx, b, "bob")
		return err == nil && n == 1
	})
	assert.Equal(t, 0, b.rec.count("bob", false), "bob must stay online")
	count, users, err := b.Users(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
	assert.Equal(t, []string{"bob"}, users)
}

// Users only on a crashed node go offline cluster-wide, and leave their
// channels, once its liveness expires, never before, each edge produced by
// exactly one claiming node and relayed once to each observer.
func TestCrashedNodeUsersGoOfflineOnce(t *testing.T) {
	srv := startRedis(t)
	dead := startNode(t, testConfig(srv.client(t), "dead"))
	obs := []*node{startNode(t, testConfig(srv.client(t), "b")), startNode(t, testConfig(srv.client(t), "c"))}
	const users = 50
	var uids []string
	for i := range users {
		uids = append(uids, fmt.Sprintf("u%d", i))
	}
	for _, o := range obs {
		o.follow(t, append(uids, "#lobby")...)
	}
	for _, uid := range uids {
		dead.SetUser(uid, 1, 0)
		dead.SetMember("lobby", uid, 1, false)
	}
	obs[1].SetUser("u0", 1, 0) // u0 has a tab on a live node too
	for _, o := range obs {
		o.rec.waitFor(t, testWait, "all online and in the lobby", func() bool {
			return len(o.rec.all()) == users && len(o.rec.membersOf("lobby")) == users
		})
	}

	c := srv.client(t)
	crashed := time.Now()
	dead.crash()
	stopped := time.Now() // no call of the dead node lands after this
	dead.stopRun()
	// No renewal comes after the crash: the earliest of these is when the
	// others may start taking the node for dead.
	expires := int64(0)
	for s := range 4 {
		if x := aliveExpiry(t, c, newShardKeys("t", s), dead.cfg.Node); expires == 0 || x < expires {
			expires = x
		}
	}
	for _, o := range obs {
		o.rec.waitFor(t, testWait, "all offline and out of the lobby on "+o.Node(), func() bool {
			return len(o.rec.all()) == 2*users-1 && len(o.rec.membersOf("lobby")) == 0
		})
	}
	// Give a duplicate a chance to show up: two more claim rounds.
	time.Sleep(2 * testClaim)
	var worst time.Duration
	for _, o := range obs {
		for _, uid := range uids[1:] {
			assert.Equal(t, 1, o.rec.count(uid, false), "offline edges of %s on %s", uid, o.Node())
			at := o.rec.edgeTime(uid, false)
			assert.GreaterOrEqual(t, at.UnixMilli(), expires, "offline of %s before the node's liveness expired", uid)
			worst = max(worst, at.Sub(crashed))
		}
		assert.Equal(t, 0, o.rec.count("u0", false), "u0 stays online through c")
		for _, uid := range uids {
			assert.Equal(t, []string{"+", "-"}, o.rec.joinEdges("lobby", uid), "lobby edges of %s on %s", uid, o.Node())
		}
	}
	t.Logf("crash to offline: worst %v (timeout %v, renew every %v, claim every %v)", worst, testTimeout, testRenew, testClaim)
	produced := func(uid string) int {
		return obs[0].rec.producedCount(uid, false) + obs[1].rec.producedCount(uid, false)
	}
	obs[0].rec.waitFor(t, testWait, "every offline produced", func() bool {
		for _, uid := range uids[1:] {
			if produced(uid) == 0 {
				return false
			}
		}
		return true
	})
	for _, uid := range uids[1:] {
		assert.Equal(t, 1, produced(uid), "offline of %s produced once across the claimers", uid)
	}
	// The users were last seen at the dead node's last proof of life, its
	// last renewal, not when a claim found it dead a lease later.
	for _, uid := range uids[1:] {
		var seen []float64
		for s := range 4 {
			if at, err := c.ZScore(context.Background(), newShardKeys("t", s).tag+":seen", uid).Result(); err == nil {
				seen = append(seen, at)
			}
		}
		require.Len(t, seen, 1, "%s's last seen", uid)
		assert.GreaterOrEqual(t, int64(seen[0]), expires-testTimeout.Milliseconds(), "%s last seen before the node's last renewal", uid)
		assert.LessOrEqual(t, int64(seen[0]), stopped.UnixMilli(), "%s last seen after the node's last call", uid)
	}
	count, _, err := obs[0].Users(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
	count, _, err = obs[0].Members(context.Background(), "lobby", "", 0)
	require.NoError(t, err)
	assert.Equal(t, 0, count)
}

// A graceful Close drops a node's leases at once: no wait for expiry.
func TestCloseDropsLeasesAtOnce(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(srv.client(t), "a")
	cfg.Timeout = time.Minute // an expiry would be far too late for this test
	cfg.RenewEvery = 20 * time.Second
	cfg.ClaimEvery = 10 * time.Second
	a := startNode(t, cfg)
	cfg.Node = "b"
	b := startNode(t, cfg)
	b.follow(t, "dave", "erin")
	a.SetUser("dave", 2, 0)
	a.SetUser("erin", 1, 0)
	b.SetUser("erin", 1, 0)
	b.rec.waitFor(t, testWait, "dave and erin online", func() bool {
		n, err := connsOf(context.Background(), b, "erin")
		return err == nil && n == 2 && b.rec.count("dave", true) == 1
	})

	require.NoError(t, a.Close(context.Background()))
	b.rec.waitFor(t, testWait, "dave offline", func() bool { return b.rec.count("dave", false) == 1 })
	// a dropped dave's record itself: no claim, so no wait for an expiry.
	assert.Equal(t, 1, a.rec.producedCount("dave", false))
	assert.Equal(t, 0, b.rec.producedCount("dave", false))
	n, err := connsOf(context.Background(), b, "erin")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, 0, b.rec.count("erin", false))
	require.NoError(t, a.Close(context.Background()), "Close is idempotent")
	a.SetUser("dave", 1, 0) // ignored after Close: nothing is queued for Redis
	assert.Zero(t, testutil.ToFloat64(a.m.pending))
	for s := range 4 {
		assert.Zero(t, aliveExpiry(t, b.rdb, newShardKeys("t", s), a.cfg.Node), "a's liveness in shard %d", s)
	}
	assert.Equal(t, 1, b.rec.count("dave", true))
}
