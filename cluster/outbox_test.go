package cluster

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// A node dies with edges it made and had not delivered: the node that
// claims it hands them to its own Relay as EventProduced, under the same IDs, before the
// offline and leave edges of the claim; edges delivered before the node
// died are not handed on again.
func TestOutboxHandsADeadNodesEdgesToItsClaimer(t *testing.T) {
	srv := startRedis(t)
	a, b := startOutboxNodes(t, srv)
	const users = 20
	uid := func(i int) string { return "u" + strconv.Itoa(i) }
	for i := range users {
		a.SetUser(uid(i), 1, 0)
		a.SetMember("room", uid(i), 1, false)
	}
	byUser := func(r *recorder) map[string][]presence.Edge {
		r.mu.Lock()
		defer r.mu.Unlock()
		out := map[string][]presence.Edge{}
		for _, e := range r.made {
			out[e.UID] = append(out[e.UID], e)
		}
		return out
	}
	a.rec.waitFor(t, testWait, "a made every online and join", func() bool {
		m := byUser(a.rec)
		for i := range users {
			if len(m[uid(i)]) < 2 {
				return false
			}
		}
		return true
	})
	made := byUser(a.rec)
	// The first half reached their receiver.
	var delivered []string
	for i := range users / 2 {
		for _, e := range made[uid(i)] {
			require.NotEmpty(t, e.ID, "an edge kept in the outbox has an ID")
			delivered = append(delivered, e.ID)
		}
	}
	require.NoError(t, a.Delivered(context.Background(), delivered))
	a.crash()

	b.rec.waitFor(t, testWait, "b claimed a", func() bool {
		m := byUser(b.rec)
		for i := range users {
			if n := len(m[uid(i)]); n == 0 || m[uid(i)][n-1].Kind != presence.EdgeOffline {
				return false
			}
		}
		return true
	})
	got := byUser(b.rec)
	var ids []string
	for i := range users {
		var kinds []string
		for _, e := range got[uid(i)] {
			kinds = append(kinds, e.Kind.String())
			ids = append(ids, e.ID)
		}
		if i < users/2 {
			assert.Equal(t, []string{"leave", "offline"}, kinds, "%s: delivered before a died", uid(i))
			continue
		}
		if assert.Equal(t, []string{"online", "join", "leave", "offline"}, kinds, "%s: a's edges, then the claim's", uid(i)) {
			assert.Equal(t, made[uid(i)][0].ID, got[uid(i)][0].ID, "%s: the online under a's ID", uid(i))
			assert.Equal(t, made[uid(i)][1].ID, got[uid(i)][1].ID, "%s: the join under a's ID", uid(i))
		}
	}

	// Once b delivered them all, Redis keeps none.
	require.NoError(t, b.Delivered(context.Background(), ids))
	c := srv.client(t)
	for _, k := range b.keys {
		ob, oe := k.outboxKeys()
		n, err := c.Exists(context.Background(), ob, oe).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "shard %s keeps edges", k.tag)
	}
}

// A node that shuts down while its edges are not delivered yet keeps its
// lease in Redis until they are: delivered, they go; if the node dies
// first, the node that claims it hands them on once its lease ran out.
func TestOutboxOutlivesAShutDown(t *testing.T) {
	srv := startRedis(t)
	a, b := startOutboxNodes(t, srv)
	a.SetUser("x", 1, 0)
	a.rec.waitFor(t, testWait, "x online", func() bool { return a.rec.producedCount("x", true) == 1 })
	require.NoError(t, a.Withdraw(context.Background()))
	require.Equal(t, 1, a.rec.producedCount("x", false), "x offline on the way down")
	// a died before its webhook delivered x's edges.
	a.crash()
	b.rec.waitFor(t, testWait, "b hands on x's edges", func() bool {
		return b.rec.producedCount("x", true) == 1 && b.rec.producedCount("x", false) == 1
	})
	a.rec.mu.Lock()
	want := []string{a.rec.made[0].ID, a.rec.made[1].ID}
	a.rec.mu.Unlock()
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	require.Len(t, b.rec.made, 2)
	assert.Equal(t, want, []string{b.rec.made[0].ID, b.rec.made[1].ID}, "the same edges, the same IDs")
}

// Without the outbox an edge has its ID in the log all the same, and Redis
// keeps no outbox.
func TestNoOutboxKeepsNothing(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	a.SetUser("x", 1, 0)
	a.rec.waitFor(t, testWait, "x online", func() bool { return a.rec.producedCount("x", true) == 1 })
	a.rec.mu.Lock()
	assert.Regexp(t, `^evt_`+a.cfg.Prefix+`_[0-9]+_[0-9]+-[0-9]+$`, a.rec.made[0].ID)
	a.rec.mu.Unlock()
	for _, k := range a.keys {
		ob, oe := k.outboxKeys()
		n, err := srv.client(t).Exists(context.Background(), ob, oe).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	}
}

// startOutboxNodes starts nodes a and b on srv with the outbox on.
func startOutboxNodes(t *testing.T, srv *redisServer) (a, b *node) {
	t.Helper()
	start := func(name string) *node {
		c := testConfig(srv.client(t), name)
		c.Outbox = true
		return startNode(t, c)
	}
	return start("a"), start("b")
}
