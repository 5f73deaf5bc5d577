package cluster

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// numberedSet runs setScript as node's call number v, from from, asking for
// the edges of the calls in unknown ("" none); it returns the state and the
// edges as "kind uid".
func numberedSet(t *testing.T, c redis.UniversalClient, k shardKeys, node string, v, from int64, unknown string, recs ...any) (int64, []string) {
	t.Helper()
	args := append([]any{k.tag, node, time.Minute.Milliseconds(), time.Hour.Milliseconds(), 0, v, 0, "w", 1, from, unknown},
		fullRecords(recs)...)
	res, err := scriptResult(setScript.Run(context.Background(), c, k.keys, args...), setHead)
	require.NoError(t, err)
	state, _ := res[1].(int64)
	var edges []string
	for i := setHead; i+4 < len(res); i += 5 {
		edges = append(edges, res[i].(string)+" "+res[i+1].(string))
	}
	return state, edges
}

// A call Redis runs twice (a client sent it again after losing its reply)
// answers the same edges and changes nothing; a call whose reply was lost
// gives its edges to the next call that asks for them; a call overtaken by
// a later one (it ran late) changes nothing.
func TestScriptsAnswerACallOnce(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	ev := listen(t, c, k.userTopic("x"), k.userTopic("y"))

	state, edges := numberedSet(t, c, k, "a", 1, 1, "", "u", "x", 1)
	assert.Equal(t, int64(0), state)
	assert.Equal(t, []string{"online x"}, edges)

	state, edges = numberedSet(t, c, k, "a", 1, 1, "", "u", "x", 1)
	assert.Equal(t, int64(0), state, "run again: the first run's reply")
	assert.Equal(t, []string{"online x"}, edges, "run again: the first run's edges, not made anew")

	// Call 2's reply is lost; call 3 asks for it.
	_, edges = numberedSet(t, c, k, "a", 2, 2, "", "u", "y", 1)
	assert.Equal(t, []string{"online y"}, edges)
	state, edges = numberedSet(t, c, k, "a", 3, 2, "2", "u", "x", 0)
	assert.Equal(t, int64(0), state)
	assert.Equal(t, []string{"online y", "offline x"}, edges, "the lost reply's edges first")

	// Call 4 was overtaken by call 5: it runs late, and changes nothing.
	_, edges = numberedSet(t, c, k, "a", 5, 4, "4", "u", "y", 0)
	assert.Equal(t, []string{"offline y"}, edges, "call 4 had not run: nothing to give back")
	state, edges = numberedSet(t, c, k, "a", 4, 4, "", "u", "y", 1)
	assert.Equal(t, int64(setStale), state)
	assert.Empty(t, edges)
	n, err := c.HGet(context.Background(), k.tag+":u", "a y").Result() // T:u
	assert.ErrorIs(t, err, redis.Nil, "the stale call left y offline: %q", n)

	// Replies older than from are forgotten: the shard keeps a few per node.
	for v := int64(6); v < 50; v++ {
		numberedSet(t, c, k, "a", v, v, "", "u", "z", int(v%2))
	}
	kept, err := c.HKeys(context.Background(), k.tag+":done").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, len(kept), 2, "replies kept: %v", kept)
	order, err := c.ZCard(context.Background(), k.tag+":dk").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(len(kept)), order, "T:dk lists what T:done keeps")

	assert.Len(t, ev.all(t, c, k.userTopic("x")), 2, "x: one online, one offline published")
	assert.Len(t, ev.all(t, c, k.userTopic("y")), 2, "y: one online, one offline published")
}

// The link to Redis stalls past the command timeout while users connect
// and join: Redis ran the node's write, and the node gave up on its reply
// (as when Redis itself freezes with the write in its socket). Every online and join is still produced once, and every
// leave and offline after it.
func TestAWriteWhoseReplyIsLostLosesNoEdge(t *testing.T) {
	srv := startRedis(t)
	p := startProxy(t, srv.addr())
	ca := p.client(t)
	a := startNode(t, testConfig(ca, "a"))
	const users = 20
	uid := func(i int) string { return "u" + strconv.Itoa(i) }

	// a wrote in every shard: none of its writes is its first there.
	a.SetUser("warm", 1, 0)
	a.rec.waitFor(t, testWait, "a writing", func() bool { return a.rec.producedCount("warm", true) == 1 })
	direct := srv.client(t)
	eventually(t, "a renewed in every shard", func(c *assert.CollectT) {
		for _, k := range a.keys {
			_, err := direct.ZScore(context.Background(), k.alive, a.cfg.Node).Result()
			assert.NoError(c, err)
		}
	})

	// Redis runs the write with the last user, and the link stalls right
	// after it: its reply is held until a has given up on it (opTimeout).
	writeErrors := a.m.redisErrors.WithLabelValues("write")
	failed := testutil.ToFloat64(writeErrors)
	p.stallAfterSent("$" + strconv.Itoa(len(uid(users-1))) + "\r\n" + uid(users-1) + "\r\n")
	for i := range users {
		a.SetUser(uid(i), 1, 0)
		a.SetMember("room", uid(i), 1, false)
	}
	require.Eventually(t, func() bool { return testutil.ToFloat64(writeErrors) > failed }, testWait, 5*time.Millisecond,
		"a gave up on its write")
	p.stall(false)

	a.rec.waitFor(t, testWait, "every user online and in the room", func() bool {
		for i := range users {
			if !slices.Contains(a.rec.madeEdges(), "join "+uid(i)+" room") {
				return false
			}
		}
		return true
	})
	for i := range users {
		a.SetMember("room", uid(i), 0, false)
		a.SetUser(uid(i), 0, 0)
	}
	a.rec.waitFor(t, testWait, "every user gone", func() bool {
		for i := range users {
			if !slices.Contains(a.rec.madeEdges(), "offline "+uid(i)) {
				return false
			}
		}
		return true
	})
	time.Sleep(testRenew + testTimeout) // anything late would be in by now
	made := a.rec.madeEdges()
	for i := range users {
		var got []string
		for _, e := range made {
			if e == "online "+uid(i) || e == "offline "+uid(i) || e == "join "+uid(i)+" room" || e == "leave "+uid(i)+" room" {
				got = append(got, e)
			}
		}
		assert.Equal(t, []string{"online " + uid(i), "join " + uid(i) + " room", "leave " + uid(i) + " room", "offline " + uid(i)}, got)
	}
}

// A node stopped in the middle of a claim: the claim's call ran, its reply
// was cut off, and the node's leave on the way down asks for its edges.
func TestALeaveAsksForTheEdgesOfACutOffClaim(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	ctx := context.Background()
	k := newShardKeys("s", 0)
	numberedSet(t, c, k, "dead", 1, 1, "", "u", "x", 1)
	require.NoError(t, c.ZAdd(ctx, k.alive, redis.Z{Score: 1, Member: "dead"}).Err()) // its lease long gone
	claimCall := func(v int64) []any {
		res, err := scriptResult(claimScript.Run(ctx, c, k.keys, k.tag, "b", int64(60000), 100, time.Hour.Milliseconds(),
			int64(0), time.Hour.Milliseconds(), 0, v, 0, "a", 1, v, ""), 3)
		require.NoError(t, err)
		return res
	}
	claimCall(1) // the shard's first claim pauses
	res := claimCall(2)
	require.Equal(t, []any{"offline", "x"}, res[claimHead:claimHead+2], "the claim reaped x")

	// The reply of call 2 never reached b; its leave is call 3.
	res, err := scriptResult(leaveScript.Run(ctx, c, k.keys, k.tag, "b", 100, time.Hour.Milliseconds(), "a", int64(3),
		int64(2), "2"), 1)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(res), 6)
	assert.Equal(t, []any{"offline", "x"}, res[1:3], "the leave brings the claim's edge")
}
