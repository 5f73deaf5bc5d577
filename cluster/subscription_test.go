package cluster

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// Redis drops the node's subscription connections (as a restart, a proxy or
// CLIENT KILL would): the node makes them again, counts the loss once per
// shard, and hears the edges that follow; a member that joined while it was
// deaf reaches it too, by the edge or by reading the topic again.
func TestKilledSubscriptionIsMadeAgain(t *testing.T) {
	srv := startRedis(t)
	admin := srv.client(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	b.follow(t, "#room")
	a.SetMember("room", "alice", 1, false)
	b.rec.waitFor(t, testWait, "alice in the room on b", func() bool {
		return slices.Equal(b.rec.membersOf("room"), []string{"alice"})
	})

	ctx := context.Background()
	killed, err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	require.NoError(t, err)
	require.Positive(t, killed, "pubsub connections killed")
	a.SetMember("room", "bob", 1, false)
	b.rec.waitFor(t, testWait, "bob in the room on b", func() bool {
		return slices.Equal(b.rec.membersOf("room"), []string{"alice", "bob"})
	})
	b.rec.waitFor(t, testWait, "b ready again", func() bool { return b.Health(ctx) == nil })
	assert.Equal(t, 1.0, testutil.ToFloat64(b.m.subscriptionsLost), "one shard followed, one loss")
	assert.Equal(t, 1.0, testutil.ToFloat64(b.m.redisUp))

	// And again: a loss is not a one-off.
	_, err = admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	require.NoError(t, err)
	a.SetMember("room", "alice", 0, false)
	b.rec.waitFor(t, testWait, "alice gone on b", func() bool {
		return slices.Equal(b.rec.membersOf("room"), []string{"bob"})
	})
	b.rec.waitFor(t, testWait, "b ready again", func() bool { return b.Health(ctx) == nil })
	assert.Equal(t, 2.0, testutil.ToFloat64(b.m.subscriptionsLost))
}

// The link to Redis loses the node's connections without a word (every
// byte thrown away, no reset), and new ones get through: the writer's new
// connections work at once, and the subscription, silent while Redis
// answers the others, is made again within a ping round or two, not after
// the minute a frozen Redis would be given.
func TestBlackholedSubscriptionIsMadeAgain(t *testing.T) {
	srv := startRedis(t)
	p := startProxy(t, srv.addr())
	cb := p.client(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(cb, "b"))
	b.follow(t, "#room")
	a.SetMember("room", "alice", 1, false)
	b.rec.waitFor(t, testWait, "alice in the room on b", func() bool {
		return slices.Equal(b.rec.membersOf("room"), []string{"alice"})
	})

	p.blackholeOpen()
	a.SetMember("room", "bob", 1, false)
	b.rec.waitFor(t, testWait, "bob in the room on b", func() bool {
		return slices.Equal(b.rec.membersOf("room"), []string{"alice", "bob"})
	})
	b.rec.waitFor(t, testWait, "b ready again", func() bool { return b.Health(context.Background()) == nil })
}

// A shard whose subscription is lost, and whose last topic is dropped
// before the subscription could be made again, has nothing to hear: it
// does not keep the node unready once Redis is back.
func TestLostSubscriptionOfNoTopicIsNotDeaf(t *testing.T) {
	srv := startRedis(t)
	b := startNode(t, testConfig(srv.client(t), "b"))
	b.follow(t, "#room")
	srv.kill()
	b.rec.waitFor(t, testWait, "the loss seen", func() bool { return testutil.ToFloat64(b.m.subscriptionsLost) >= 1 })
	b.Unfollow([]presence.Topic{{Channel: "room"}})
	eventually(t, "room no longer followed", func(c *assert.CollectT) {
		b.r.mu.Lock()
		defer b.r.mu.Unlock()
		assert.Empty(c, b.r.topics)
	})
	srv.start()
	b.rec.waitFor(t, testWait, "b ready", func() bool { return b.Health(context.Background()) == nil })
}

// Readiness names what is wrong: a failed write, then a deaf shard; it is
// back once both are over, and redis_up follows.
func TestHealthTellsWritesAndDeafShards(t *testing.T) {
	srv := startRedis(t)
	m, err := newMetrics(nil, "")
	require.NoError(t, err)
	h := newHealth(srv.client(t), slog.New(slog.DiscardHandler), m)
	ctx := context.Background()
	require.NoError(t, h.ready(ctx))

	h.wrote(errors.New("MOVED 42 127.0.0.1:1"))
	err = h.ready(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not take this node's writes")
	assert.Zero(t, testutil.ToFloat64(m.redisUp))

	h.wrote(nil)
	assert.True(t, h.lost(3, errors.New("redis ended the subscription")), "the first loss is news")
	assert.False(t, h.lost(3, errors.New("again")), "the second is not")
	h.lost(1, errors.New("EOF"))
	err = h.ready(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot hear 2 shard(s)")
	assert.Contains(t, err.Error(), "shard 1 since")
	assert.Zero(t, testutil.ToFloat64(m.redisUp))
	assert.Equal(t, 2.0, testutil.ToFloat64(m.subscriptionsLost))

	assert.Positive(t, h.heard(1))
	assert.Zero(t, h.heard(1), "heard twice is nothing new")
	require.Error(t, h.ready(ctx), "shard 3 is still deaf")
	h.heard(3)
	require.NoError(t, h.ready(ctx))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.redisUp))
}
