package cluster

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node cut off while Redis restarts empty, and back just after the
// restore window the other node opened, was never reaped: nobody made its
// users' offline edges, so none of them gets an online edge again. (Found
// by TestModelEdgesAlternate, seed 13.)
func TestANodeBackJustAfterTheRestoreWindowMakesNoEdge(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	pb := startProxy(t, srv.addr())
	b := startNode(t, testConfig(pb.client(t), "b"))
	pa := startProxy(t, srv.addr())
	a := startNode(t, testConfig(pa.client(t), "a"))
	nodes := []*node{a, b}
	uids := userIDs("u", 8)
	for _, uid := range uids {
		a.SetUser(uid, 1, 0)
	}
	edges := func() map[string]string {
		m := map[string]string{}
		for _, uid := range uids {
			m[uid] = edgeWords(mergedEdges(nodes, uid))
		}
		return m
	}
	want := map[string]string{}
	for _, uid := range uids {
		want[uid] = "on"
	}
	b.rec.waitFor(t, testWait, "every user online", func() bool { return assert.ObjectsAreEqual(want, edges()) })

	// b's writes landed in every shard, so that it finds the loss.
	require.Eventually(t, func() bool {
		for s := range 4 {
			if n, err := c.HLen(context.Background(), newShardKeys("t", s).tag+":ver").Result(); err != nil || n < 2 {
				return false
			}
		}
		return true
	}, testWait, 10*time.Millisecond, "both nodes wrote in every shard")
	pa.cut(true)
	srv.restart()
	// b finds the loss and opens the restore window; a comes back once it
	// has closed, well within a lease of its end.
	require.Eventually(t, func() bool {
		now, err := c.Time(context.Background()).Result()
		if err != nil {
			return false
		}
		for s := range 4 {
			till, err := c.HGet(context.Background(), newShardKeys("t", s).tag+":clock", "restore").Result()
			if ms, _ := strconv.ParseInt(till, 10, 64); err != nil || ms == 0 || now.UnixMilli() < ms {
				return false
			}
		}
		return true
	}, testWait, 10*time.Millisecond, "b opened a restore window in every shard, and it closed")
	pa.cut(false)
	b.rec.waitFor(t, testWait, "every user online in the new redis", func() bool {
		n, _, err := b.Users(context.Background(), 0)
		return err == nil && n == len(uids)
	})
	// A few claim and renewal rounds later, nothing more.
	time.Sleep(3 * testTimeout)
	assert.Equal(t, want, edges(), "each user's edges, over both nodes")
}

// A restore after the window puts back a user that went offline since the
// loss with its online edge again: the script reads the user's last seen to
// tell so, for a user that has one.
func TestARestoreAfterTheWindowReadsTheLastSeen(t *testing.T) {
	c := startRedis(t).client(t)
	k := newShardKeys("t", 0)
	minute := time.Minute.Milliseconds()
	set := func(mode string, v, landed int64, n int) []any {
		t.Helper()
		res, err := scriptResult(setScript.Run(context.Background(), c, k.keys, k.tag, "a", minute, minute, landed, v,
			minute, mode, 1, v, "", "u", "u1", n, 0), setHead)
		require.NoError(t, err)
		return res
	}
	set("w", 1, 0, 1)
	set("w", 2, 1, 0) // u1 goes offline: it has a last seen
	res := set("r", 3, 2, 1)
	assert.Equal(t, int64(3), res[1], "restored")
	assert.Equal(t, []any{"online", "u1", ""}, res[setHead:setHead+3], "u1's online edge")
}
