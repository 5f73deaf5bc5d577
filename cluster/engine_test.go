package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

	a.SetUser("alice", 1)
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "alice online on "+n.Node(), func() bool { return n.rec.count("alice", true) == 1 })
	}
	conns, err := b.User(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, 1, conns)

	// A second node and more tabs: connections add up, no new edge.
	b.SetUser("alice", 2)
	a.rec.waitFor(t, testWait, "alice has 3 connections", func() bool {
		n, err := a.User(ctx, "alice")
		return err == nil && n == 3
	})
	count, users, err := a.Users(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
	assert.Equal(t, []string{"alice"}, users)

	// Leaving node a keeps alice online through node b.
	a.SetUser("alice", 0)
	b.rec.waitFor(t, testWait, "alice down to 2 connections", func() bool {
		n, err := b.User(ctx, "alice")
		return err == nil && n == 2
	})
	b.SetUser("alice", 0)
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "alice offline on "+n.Node(), func() bool { return n.rec.count("alice", false) == 1 })
	}
	conns, err = a.User(ctx, "alice")
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
	// reaches UserChanged over Pub/Sub, and Produced only when the node
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
			a.SetUser(uid, 1)
		} else {
			b.SetUser(uid, 1)
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
	require.NoError(t, a.Publish(context.Background(), presence.Message{Channel: "lobby", Frame: []byte(msg)}))
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "chat on "+n.Node(), func() bool {
			n.rec.mu.Lock()
			defer n.rec.mu.Unlock()
			return len(n.rec.chats) == 1 && n.rec.chats[0] == msg
		})
	}
	require.NoError(t, a.Publish(context.Background(), presence.Message{UID: "bob", Frame: []byte(`{"type":"message"}`)}))
	b.follow(t, "bob")
	require.NoError(t, a.Publish(context.Background(), presence.Message{UID: "bob", Frame: []byte(`{"type":"message","n":2}`)}))
	b.rec.waitFor(t, testWait, "message to bob on b", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return len(b.rec.chats) == 2 && b.rec.chats[1] == `{"type":"message","n":2}`
	})
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
	a.SetUser("bob", 1)
	b.SetUser("bob", 1)
	a.SetUser("carol", 1) // only on the node that dies: the control
	b.rec.waitFor(t, testWait, "bob has 2 connections", func() bool {
		n, err := b.User(ctx, "bob")
		return err == nil && n == 2
	})

	a.crash()
	a.stopRun()
	// carol's offline proves a's leases expired and were claimed.
	b.rec.waitFor(t, testWait, "carol offline", func() bool { return b.rec.count("carol", false) == 1 })
	b.rec.waitFor(t, testWait, "bob's lease on a claimed", func() bool {
		n, err := b.User(ctx, "bob")
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
		dead.SetUser(uid, 1)
		dead.SetMember("lobby", uid, 1)
	}
	obs[1].SetUser("u0", 1) // u0 has a tab on a live node too
	for _, o := range obs {
		o.rec.waitFor(t, testWait, "all online and in the lobby", func() bool {
			return len(o.rec.all()) == users && len(o.rec.membersOf("lobby")) == users
		})
	}

	c := srv.client(t)
	crashed := time.Now()
	dead.crash()
	dead.stopRun()
	// No renewal comes after the crash: the earliest of these is when the
	// others may start taking the node for dead.
	expires := int64(0)
	for s := range 4 {
		if x := aliveExpiry(t, c, newShardKeys("t", s), "dead"); expires == 0 || x < expires {
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
	count, _, err := obs[0].Users(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
	count, _, err = obs[0].Members(context.Background(), "lobby", 0)
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
	a.SetUser("dave", 2)
	a.SetUser("erin", 1)
	b.SetUser("erin", 1)
	b.rec.waitFor(t, testWait, "dave and erin online", func() bool {
		n, err := b.User(context.Background(), "erin")
		return err == nil && n == 2 && b.rec.count("dave", true) == 1
	})

	require.NoError(t, a.Close(context.Background()))
	b.rec.waitFor(t, testWait, "dave offline", func() bool { return b.rec.count("dave", false) == 1 })
	// a dropped dave's record itself: no claim, so no wait for an expiry.
	assert.Equal(t, 1, a.rec.producedCount("dave", false))
	assert.Equal(t, 0, b.rec.producedCount("dave", false))
	n, err := b.User(context.Background(), "erin")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, 0, b.rec.count("erin", false))
	require.NoError(t, a.Close(context.Background()), "Close is idempotent")
	a.SetUser("dave", 1) // ignored after Close: nothing is queued for Redis
	assert.Zero(t, testutil.ToFloat64(a.m.pending))
	for s := range 4 {
		assert.Zero(t, aliveExpiry(t, b.rdb, newShardKeys("t", s), "a"), "a's liveness in shard %d", s)
	}
	assert.Equal(t, 1, b.rec.count("dave", true))
}

// Redis killed mid-test and restarted empty: nodes keep their users, re-assert
// leases, and changes made during the outage come through, once.
func TestRedisRestartedEmpty(t *testing.T) {
	srv := startRedis(t)
	regA := prometheus.NewRegistry()
	cfgA := testConfig(srv.client(t), "a")
	cfgA.Registerer = regA
	a := startNode(t, cfgA)
	b := startNode(t, testConfig(srv.client(t), "b"))
	ctx := context.Background()
	for _, n := range []*node{a, b} {
		n.follow(t, "stays-a", "stays-b", "leaves", "arrives", "late", "#room")
	}
	a.SetUser("stays-a", 1)
	a.SetMember("room", "stays-a", 1)
	b.SetUser("stays-b", 1)
	a.SetUser("leaves", 1)
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "three online on "+n.Node(), func() bool {
			return len(n.rec.all()) == 3 && len(n.rec.membersOf("room")) == 1
		})
	}

	srv.kill()
	require.Error(t, a.Health(ctx))
	// A write that succeeded just before the kill may report after Health.
	a.rec.waitFor(t, testWait, "redis down", func() bool { return testutil.ToFloat64(a.m.redisUp) == 0 })
	a.SetUser("leaves", 0)      // goes offline while Redis is away
	b.SetUser("arrives", 1)     // comes online while Redis is away
	time.Sleep(2 * testTimeout) // an outage longer than a lease
	assert.Positive(t, testutil.ToFloat64(a.m.pending), "changes wait for Redis")
	srv.restart()

	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "leaves offline and arrives online on "+n.Node(), func() bool {
			return n.rec.count("leaves", false) == 1 && n.rec.count("arrives", true) == 1
		})
	}
	a.rec.waitFor(t, testWait, "redis up again", func() bool { return testutil.ToFloat64(a.m.redisUp) == 1 })
	require.NoError(t, a.Health(ctx))
	b.rec.waitFor(t, testWait, "leases re-asserted", func() bool {
		count, _, err := b.Users(ctx, 0)
		return err == nil && count == 3
	})
	_, users, err := a.Users(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"arrives", "stays-a", "stays-b"}, users)
	assert.Positive(t, testutil.ToFloat64(a.m.rewritten))
	// Wait past the reconciliation, then check that nobody flickered.
	time.Sleep(testRenew + testTimeout)
	for _, n := range []*node{a, b} {
		for _, uid := range []string{"stays-a", "stays-b"} {
			assert.Equal(t, 0, n.rec.count(uid, false), "%s false offline on %s", uid, n.Node())
			assert.Equal(t, 1, n.rec.count(uid, true), "%s repeated online on %s", uid, n.Node())
		}
		assert.Equal(t, 1, n.rec.count("leaves", false), "on %s", n.Node())
		assert.Equal(t, 1, n.rec.count("arrives", true), "on %s", n.Node())
		assert.Equal(t, []string{"stays-a"}, n.rec.membersOf("room"), "on %s", n.Node())
		assert.Equal(t, []string{"+"}, n.rec.joinEdges("room", "stays-a"), "no false leave on %s", n.Node())
	}
	// And the cluster still works after the restart.
	a.SetUser("late", 1)
	b.rec.waitFor(t, testWait, "late online", func() bool { return b.rec.count("late", true) == 1 })
}

// A node that was cut off from Redis longer than a lease while Redis itself
// stayed up is taken offline by the others, and comes back when it reconnects.
func TestPartitionedNodeReassertsWhenBack(t *testing.T) {
	srv := startRedis(t)
	b := startNode(t, testConfig(srv.client(t), "b"))
	// a reaches Redis through a proxy the test can cut.
	p := startProxy(t, srv.addr())
	ca := redis.NewClient(&redis.Options{Addr: p.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = ca.Close() })
	a := startNode(t, testConfig(ca, "a"))
	a.follow(t, "frank")
	b.follow(t, "frank")
	a.SetUser("frank", 1)
	b.rec.waitFor(t, testWait, "frank online", func() bool { return b.rec.count("frank", true) == 1 })

	p.cut(true)
	b.rec.waitFor(t, testWait, "frank offline after a's lease expired", func() bool { return b.rec.count("frank", false) == 1 })
	p.cut(false)
	b.rec.waitFor(t, testWait, "frank online again", func() bool { return b.rec.count("frank", true) == 2 })
	a.rec.waitFor(t, testWait, "a sees frank online", func() bool {
		n, err := a.User(context.Background(), "frank")
		return err == nil && n == 1
	})
	// a's clients may have seen frank's cluster-wide offline; they end online.
	a.rec.waitFor(t, testWait, "a's last edge for frank is online", func() bool {
		edges := a.rec.all()
		return len(edges) > 0 && edges[len(edges)-1].uid == "frank" && edges[len(edges)-1].on
	})
}

// Redis stalls (SIGSTOP) for longer than a lease, with its data: when it comes
// back every lease looks expired, yet no live node's user may go offline.
// Claims still work afterwards.
func TestRedisStalledLongerThanLease(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	for _, n := range []*node{a, b} {
		n.follow(t, "on-a", "on-b")
	}
	a.SetUser("on-a", 1)
	b.SetUser("on-b", 1)
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "both online on "+n.Node(), func() bool { return len(n.rec.all()) == 2 })
	}

	srv.freeze(true)
	time.Sleep(3 * testTimeout)
	srv.freeze(false)
	a.rec.waitFor(t, testWait, "a reaches redis again", func() bool { return a.Health(context.Background()) == nil })
	// Several claim rounds and a reconciliation later, nobody flickered.
	time.Sleep(2 * testTimeout)
	for _, n := range []*node{a, b} {
		for _, uid := range []string{"on-a", "on-b"} {
			assert.Equal(t, 0, n.rec.count(uid, false), "%s false offline on %s", uid, n.Node())
		}
	}
	count, _, err := b.Users(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, 2, count)

	a.crash()
	b.rec.waitFor(t, testWait, "on-a offline after a crashed", func() bool { return b.rec.count("on-a", false) == 1 })
}

// The engine on a real 3-master Redis Cluster: every script touches one
// slot, shards spread over the masters, each shard's Pub/Sub connects to the
// master that owns it, and a crashed node's users go offline once.
func TestEngineOnRedisCluster(t *testing.T) {
	rc := startRedisCluster(t)
	cfg := func(name string) Config {
		c := testConfig(rc.client(t), name)
		c.Shards = 16
		return c
	}
	a := startNode(t, cfg("a"))
	b := startNode(t, cfg("b"))
	ctx := context.Background()
	var uids []string
	for i := range 12 { // spread over the shards, and so the masters
		uids = append(uids, fmt.Sprintf("c%02d", i))
	}
	b.follow(t, append(uids, "#lobby", "#hall")...)
	for _, uid := range uids {
		a.SetUser(uid, 1)
		a.SetMember("lobby", uid, 1)
	}
	b.SetUser("c00", 1)
	b.SetMember("hall", "c00", 1)
	b.rec.waitFor(t, testWait, "12 users online on b", func() bool {
		return len(b.rec.all()) == 12 && len(b.rec.membersOf("lobby")) == 12
	})
	// b shows its own c00 at once; both nodes' writes of c00 land on their
	// own time, each shard's on its own master.
	eventually(t, "both nodes' records of c00 written", func(c *assert.CollectT) {
		n, err := b.User(ctx, "c00")
		assert.NoError(c, err)
		assert.Equal(c, 2, n)
	})
	count, users, err := b.Users(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, 12, count)
	assert.Equal(t, []string{"c00", "c01", "c02"}, users)
	count, members, err := a.Members(ctx, "lobby", 2)
	require.NoError(t, err)
	assert.Equal(t, 12, count)
	assert.Equal(t, []string{"c00", "c01"}, members)
	require.NoError(t, a.Publish(ctx, presence.Message{Channel: "lobby", Frame: []byte(`{"type":"chat"}`)}))
	b.rec.waitFor(t, testWait, "chat on b", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return len(b.rec.chats) == 1
	})

	a.crash()
	b.rec.waitFor(t, testWait, "a's users offline and out of the lobby", func() bool {
		return len(b.rec.all()) == 23 && len(b.rec.membersOf("lobby")) == 0
	})
	assert.Equal(t, 0, b.rec.count("c00", false), "c00 has a connection on b")
	assert.Equal(t, []string{"c00"}, b.rec.membersOf("hall"))
	// The claim's reply reaches b's writer a moment after its edges reach b's
	// reader.
	b.rec.waitFor(t, testWait, "b reaped each of a's users", func() bool {
		for _, uid := range uids[1:] {
			if b.rec.producedCount(uid, false) == 0 {
				return false
			}
		}
		return true
	})
	for _, uid := range uids[1:] {
		assert.Equal(t, 1, b.rec.producedCount(uid, false), "b reaped %s once", uid)
	}
}

// A publish sent while Redis stalls is delivered at most once, and reported
// failed only if it was not delivered.
func TestPublishDuringRedisStall(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	b.follow(t, "#lobby")
	const chat, marker = `{"type":"chat"}`, `{"type":"marker"}`
	count := func(frame string) int {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return countIn(b.rec.chats, frame)
	}
	for round := range 3 {
		before := count(chat)
		srv.freeze(true)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			done <- a.Publish(ctx, presence.Message{Channel: "lobby", Frame: []byte(chat)})
		}()
		time.Sleep(time.Second) // past the publish's deadline
		srv.freeze(false)
		var err error
		select {
		case err = <-done:
		case <-time.After(testWait):
			t.Fatal("Publish did not return after Redis resumed")
		}
		// A marker published after it, in order on the same topic: once it
		// arrives, the stalled one has arrived too, if it ever will.
		require.NoError(t, a.Publish(context.Background(), presence.Message{Channel: "lobby", Frame: []byte(marker)}))
		b.rec.waitFor(t, testWait, "the marker", func() bool { return count(marker) == round+1 })
		delivered := count(chat) - before
		t.Logf("round %d: Publish returned %v; delivered %d times", round, err, delivered)
		if err == nil {
			assert.Equal(t, 1, delivered, "reported delivered: delivered once")
		} else {
			assert.Equal(t, 0, delivered, "reported failed: not delivered")
		}
	}
}

func countIn(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// A node cut off from Redis when its client follows a channel learns the
// channel's members, and the others learn of its member, once it is back.
func TestFollowWhileRedisIsUnreachable(t *testing.T) {
	srv := startRedis(t)
	b := startNode(t, testConfig(srv.client(t), "b"))
	b.follow(t, "#room")
	b.SetUser("bob", 1)
	b.SetMember("room", "bob", 1)
	b.rec.waitFor(t, testWait, "bob in the room", func() bool { return len(b.rec.membersOf("room")) == 1 })
	p := startProxy(t, srv.addr())
	ca := redis.NewClient(&redis.Options{Addr: p.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = ca.Close() })
	a := startNode(t, testConfig(ca, "a"))

	p.cut(true)
	require.Error(t, a.Health(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	assert.Error(t, a.Follow(ctx, []presence.Topic{{Channel: "room"}}), "no state while Redis is away")
	cancel()
	a.SetUser("alice", 1)
	a.SetMember("room", "alice", 1)
	p.cut(false)
	a.rec.waitFor(t, testWait, "a learns of bob", func() bool {
		return slices.Equal(a.rec.membersOf("room"), []string{"alice", "bob"})
	})
	b.rec.waitFor(t, testWait, "b learns of alice", func() bool {
		return slices.Equal(b.rec.membersOf("room"), []string{"alice", "bob"})
	})
}
