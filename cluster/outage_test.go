package cluster

import (
	"context"
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
			done <- a.Publish(ctx, presence.Message{Channel: "lobby", Frame: encoded("chat", chat)})
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
		require.NoError(t, a.Publish(context.Background(), presence.Message{Channel: "lobby", Frame: encoded("marker", marker)}))
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
