package cluster

import (
	"context"
	"slices"
	"strconv"
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
	a.SetUser("stays-a", 1, 0)
	a.SetMember("room", "stays-a", 1, false)
	b.SetUser("stays-b", 1, 0)
	a.SetUser("leaves", 1, 0)
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "three online on "+n.Node(), func() bool {
			return len(n.rec.all()) == 3 && len(n.rec.membersOf("room")) == 1
		})
	}

	srv.kill()
	require.Error(t, a.Health(ctx))
	// A write that succeeded just before the kill may report after Health.
	a.rec.waitFor(t, testWait, "redis down", func() bool { return testutil.ToFloat64(a.m.redisUp) == 0 })
	a.SetUser("leaves", 0, 0)   // goes offline while Redis is away
	b.SetUser("arrives", 1, 0)  // comes online while Redis is away
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
	a.SetUser("late", 1, 0)
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
	a.SetUser("frank", 1, 0)
	b.rec.waitFor(t, testWait, "frank online", func() bool { return b.rec.count("frank", true) == 1 })

	p.cut(true)
	b.rec.waitFor(t, testWait, "frank offline after a's lease expired", func() bool { return b.rec.count("frank", false) == 1 })
	p.cut(false)
	b.rec.waitFor(t, testWait, "frank online again", func() bool { return b.rec.count("frank", true) == 2 })
	a.rec.waitFor(t, testWait, "a sees frank online", func() bool {
		n, err := connsOf(context.Background(), a, "frank")
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
	a.SetUser("on-a", 1, 0)
	b.SetUser("on-b", 1, 0)
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

// A publish sent while Redis stalls returns by its ctx's deadline whatever
// the stall: delivered once if it said so, never if it said not, even when
// Redis runs it after the stall. Stalls end well within the wait, around its
// last moment, and after it.
func TestPublishDuringRedisStall(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	b.follow(t, "#lobby")
	const marker, wait = `{"type":"marker"}`, 800 * time.Millisecond
	count := func(frame string) int {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return countIn(b.rec.chats, frame)
	}
	// Warm the clock and the connections: the first publish reads Redis's clock.
	require.NoError(t, a.Publish(context.Background(), presence.Message{Channel: "lobby", Frame: encoded("marker", marker)}))
	for round, stall := range []time.Duration{wait / 8, wait * 3 / 4, wait, 2 * wait} {
		chat := `{"type":"chat","n":` + strconv.Itoa(round) + `}`
		srv.freeze(true)
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			done <- a.Publish(ctx, presence.Message{Channel: "lobby", Frame: encoded("chat", chat)})
		}()
		var err error
		returned := false
		select {
		case err = <-done:
			returned = true
		case <-time.After(stall):
		}
		srv.freeze(false)
		if !returned {
			select {
			case err = <-done:
			case <-time.After(testWait):
				t.Fatal("Publish did not return")
			}
		}
		took := time.Since(start)
		assert.Less(t, took, wait+200*time.Millisecond, "round %d: Publish outlasted its ctx", round)
		// A marker published after it, in order on the same topic: once it
		// arrives, the stalled one has arrived too, if it ever will.
		require.NoError(t, a.Publish(context.Background(), presence.Message{Channel: "lobby", Frame: encoded("marker", marker)}))
		b.rec.waitFor(t, testWait, "the marker", func() bool { return count(marker) == round+2 })
		delivered := count(chat)
		t.Logf("round %d, a %v stall: Publish returned %v after %v; delivered %d times", round, stall, err, took.Round(time.Millisecond), delivered)
		if err == nil {
			assert.Equal(t, 1, delivered, "round %d: reported delivered: delivered once", round)
		} else {
			assert.Equal(t, 0, delivered, "round %d: reported failed: not delivered", round)
		}
		if stall >= wait {
			assert.Error(t, err, "round %d: Redis stalled past the wait", round)
		}
	}
	assert.Zero(t, testutil.ToFloat64(a.m.publishedLate), "published after Publish said not")
}

// The publish queue is bounded: a message more is refused at once and never
// delivered, while those taken are delivered once Redis takes them. The link
// to Redis stalls (Redis itself and b's subscription stay up) and the queue
// is filled step by step, each step waited for, with a publish timeout no
// step comes near: nobody gives up and frees a place while the test fills
// the queue.
func TestPublishQueueFull(t *testing.T) {
	srv := startRedis(t)
	p := startProxy(t, srv.addr())
	cfg := testConfig(p.client(t), "a")
	cfg.PublishQueue, cfg.Batch = 2, 1 // one on its way, two waiting
	cfg.PublishTimeout = 3 * testWait
	a := startNode(t, cfg)
	b := startNode(t, testConfig(srv.client(t), "b"))
	b.follow(t, "#lobby")
	chat := func(i int) presence.Message {
		return presence.Message{Channel: "lobby", Frame: encoded("chat", `{"n":`+strconv.Itoa(i)+`}`)}
	}
	delivered := func(i int) int { return chatsIn(b.rec, `{"n":`+strconv.Itoa(i)+`}`) }
	// Warm the clock: the first publish reads Redis's clock.
	require.NoError(t, a.Publish(context.Background(), chat(0)))
	b.rec.waitFor(t, testWait, "the first", func() bool { return delivered(0) == 1 })

	p.stall(true)
	type outcome struct {
		i   int
		err error
	}
	taken := make(chan outcome, 3)
	publish := func(i int) {
		go func() { taken <- outcome{i, a.Publish(context.Background(), chat(i))} }()
	}
	publish(1)
	require.Eventually(t, func() bool { return p.saw(`{"n":1}`) }, testWait, time.Millisecond, "the first goes out")
	publish(2)
	publish(3)
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.publishQueue) == 2 }, testWait, time.Millisecond,
		"two wait")
	var slowest time.Duration
	for i := 4; i <= 6; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		start := time.Now()
		err := a.Publish(ctx, chat(i))
		slowest = max(slowest, time.Since(start))
		cancel()
		require.ErrorIs(t, err, errQueueFull, "publish %d, the queue full", i)
	}
	t.Logf("3 refused for a full queue, the slowest in %v", slowest.Round(time.Microsecond))
	assert.Equal(t, 3.0, testutil.ToFloat64(a.m.publishFailed.WithLabelValues("queue_full")))

	p.stall(false)
	for range 3 {
		select {
		case o := <-taken:
			require.NoError(t, o.err, "publish %d, taken", o.i)
		case <-time.After(cfg.PublishTimeout + testWait):
			t.Fatal("a taken publish did not return")
		}
	}
	b.rec.waitFor(t, testWait, "the three taken", func() bool { return delivered(1) == 1 && delivered(2) == 1 && delivered(3) == 1 })
	// A marker after them, in order on the same topic: once it arrives,
	// anything else published before it has arrived too.
	require.NoError(t, a.Publish(context.Background(), chat(99)))
	b.rec.waitFor(t, testWait, "the last", func() bool { return delivered(99) == 1 })
	for i := 1; i <= 6; i++ {
		want := 0
		if i <= 3 {
			want = 1
		}
		assert.Equal(t, want, delivered(i), "message %d", i)
	}
}

// A publish whose answer is lost with its connection, while its caller
// still waits, is settled once Redis answers again: the caller is told
// whether it was published, and it was, once, exactly when told so. In
// even rounds the publish reached Redis before its connection broke, in odd
// ones it did not.
func TestPublishSettlesALostAnswer(t *testing.T) {
	srv := startRedis(t)
	p := startProxy(t, srv.addr())
	// No retries by go-redis: the answer is lost, not asked for again.
	ca := redis.NewClient(&redis.Options{Addr: p.addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 2 * time.Second, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ca.Close() })
	a := startNode(t, testConfig(ca, "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	b.follow(t, "#lobby")
	const marker = `{"type":"marker"}`
	require.NoError(t, a.Publish(context.Background(), presence.Message{Channel: "lobby", Frame: encoded("marker", marker)}))
	for round := range 4 {
		chat := `{"type":"chat","n":` + strconv.Itoa(round) + `}`
		reached := round%2 == 0
		if reached {
			srv.freeze(true) // the publish waits in Redis's socket, unread
		} else {
			p.mute(true) // the publish never reaches Redis
		}
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			done <- a.Publish(ctx, presence.Message{Channel: "lobby", Frame: encoded("chat", chat)})
		}()
		require.Eventually(t, func() bool { return p.saw(chat) }, testWait, time.Millisecond, "round %d: the publish goes out", round)
		if reached {
			p.cut(true) // its answer is lost
			time.Sleep(100 * time.Millisecond)
			p.cut(false)
			srv.freeze(false)
		} else {
			p.mute(false) // its connection breaks
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(testWait):
			t.Fatal("Publish did not return")
		}
		require.NoError(t, a.Publish(context.Background(), presence.Message{Channel: "lobby", Frame: encoded("marker", marker)}))
		b.rec.waitFor(t, testWait, "the marker", func() bool { return chatsIn(b.rec, marker) == round+2 })
		delivered := chatsIn(b.rec, chat)
		t.Logf("round %d: Publish returned %v; delivered %d times", round, err, delivered)
		if err == nil {
			assert.Equal(t, 1, delivered, "round %d: reported delivered: delivered once", round)
		} else {
			assert.Equal(t, 0, delivered, "round %d: reported failed: not delivered", round)
		}
		if !reached {
			assert.Error(t, err, "round %d: never reached Redis", round)
		}
	}
	assert.Zero(t, testutil.ToFloat64(a.m.publishedLate), "published after Publish said not")
}

func chatsIn(r *recorder, frame string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return countIn(r.chats, frame)
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
	b.SetUser("bob", 1, 0)
	b.SetMember("room", "bob", 1, false)
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
	a.SetUser("alice", 1, 0)
	a.SetMember("room", "alice", 1, false)
	p.cut(false)
	a.rec.waitFor(t, testWait, "a learns of bob", func() bool {
		return slices.Equal(a.rec.membersOf("room"), []string{"alice", "bob"})
	})
	b.rec.waitFor(t, testWait, "b learns of alice", func() bool {
		return slices.Equal(b.rec.membersOf("room"), []string{"alice", "bob"})
	})
}

// While Redis hangs, go-redis holds a Pub/Sub connection's lock as long as
// it tries to reconnect it; a Follow must not wait behind that past its ctx,
// nor Unfollow, SetUser and SetMember at all: a WebSocket reader makes
// these calls. The follow completes once Redis is back.
func TestFollowDoesNotWaitOnAHungRedis(t *testing.T) {
	srv := startRedis(t)
	p := startProxy(t, srv.addr())
	ca := redis.NewClient(&redis.Options{Addr: p.addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 2 * time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = ca.Close() })
	a := startNode(t, testConfig(ca, "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	// One topic in every shard, so each has a Pub/Sub to reconnect.
	var names []string
	for i := 0; len(names) < len(a.keys); i++ {
		name := "#warm-" + strconv.Itoa(i)
		if !slices.ContainsFunc(names, func(n string) bool { return a.topicShard(topics(n)[0]) == a.topicShard(topics(name)[0]) }) {
			names = append(names, name)
		}
	}
	a.follow(t, names...)

	p.swallow(true)
	a.rec.waitFor(t, testWait, "redis down", func() bool { return a.Health(context.Background()) != nil })
	const wait = 300 * time.Millisecond
	var worst time.Duration
	for i := range 8 {
		uid := "late-" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		start := time.Now()
		_ = a.Follow(ctx, topics(uid, "#late-"+strconv.Itoa(i)))
		a.SetUser(uid, 1, 0)
		a.SetMember("late-"+strconv.Itoa(i), uid, 1, false)
		a.Unfollow(topics("#warm-0"))
		worst = max(worst, time.Since(start))
		cancel()
		time.Sleep(testRenew / 2) // let the Pub/Subs try to reconnect meanwhile
	}
	t.Logf("slowest Follow, SetUser, SetMember and Unfollow while Redis hangs: %v (ctx %v)", worst, wait)
	assert.Less(t, worst, wait+testRenew, "the reader's calls wait on Redis no longer than their ctx")

	b.follow(t, "#late-7")
	p.swallow(false)
	b.rec.waitFor(t, testWait, "b sees late-7 join", func() bool { return slices.Contains(b.rec.membersOf("late-7"), "late-7") })
	a.rec.waitFor(t, testWait, "a has the state of late-7", func() bool { return slices.Contains(a.rec.membersOf("late-7"), "late-7") })
}
