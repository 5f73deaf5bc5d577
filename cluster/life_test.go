package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lifeNode drives the scripts for one node by hand, as its writer does: it
// numbers its calls, counts those that landed, and carries its life.
type lifeNode struct {
	t            *testing.T
	c            redis.UniversalClient
	k            shardKeys
	name         string
	v, landed    int64
	life, ended  int64
	reaped       reaps
	onl, offl    map[string]int // edges this node's calls made, per user
	restoreAfter bool           // the last call found Redis lost this node's writes
}

func newLifeNode(t *testing.T, c redis.UniversalClient, k shardKeys, name string) *lifeNode {
	return &lifeNode{t: t, c: c, k: k, name: name, life: 1, reaped: make(reaps, 1),
		onl: map[string]int{}, offl: map[string]int{}}
}

func (n *lifeNode) count(edges []any) {
	for i := 0; i+4 < len(edges); i += 5 {
		switch edges[i] {
		case "online":
			n.onl[edges[i+1].(string)]++
		case "offline":
			n.offl[edges[i+1].(string)]++
		}
	}
}

// set runs setScript in mode with recs ("u", uid, n, away, ...) and
// returns its state.
func (n *lifeNode) set(mode string, recs ...any) int64 {
	n.t.Helper()
	n.v++
	life := n.life
	if mode == "a" {
		life = max(n.life, n.ended) + 1
	}
	args := append([]any{n.k.tag, n.name, time.Minute.Milliseconds(), time.Hour.Milliseconds(), n.landed, n.v,
		time.Minute.Milliseconds(), mode, life, n.v, ""}, recs...)
	res, err := scriptResult(setScript.Run(context.Background(), n.c, n.k.keys, args...), setHead)
	require.NoError(n.t, err)
	n.landed = n.v
	n.count(res[setHead:])
	state, _ := res[1].(int64)
	held, _ := res[3].(int64)
	switch state {
	case setOwed:
		n.ended = max(n.ended, held)
	case setLost:
		n.restoreAfter = true
	case 0, 3:
		n.life = max(n.life, life, held)
	}
	return state
}

// claim runs one claim call of phase "a" and remembers what it reaped.
func (n *lifeNode) claim() {
	n.t.Helper()
	n.v++
	args := append([]any{n.k.tag, n.name, time.Minute.Milliseconds(), 100, time.Hour.Milliseconds(), int64(0),
		time.Hour.Milliseconds(), n.landed, n.v, time.Minute.Milliseconds(), "a", n.life, n.v, "", ""}, n.reaped.args(0)...)
	res, err := scriptResult(claimScript.Run(context.Background(), n.c, n.k.keys, args...), claimHead)
	require.NoError(n.t, err)
	n.landed = n.v
	now, _ := res[3].(int64)
	reaped, _ := res[4].(string)
	forgot, _ := res[5].(string)
	n.reaped.update(0, now, reaped, forgot)
	n.count(res[claimHead:])
}

// expire ends node's lease in the shard, as if it stopped renewing.
func expire(t *testing.T, c redis.UniversalClient, k shardKeys, node string) {
	t.Helper()
	require.NoError(t, c.ZAdd(context.Background(), k.alive, redis.Z{Score: 1, Member: node}).Err())
}

// A node reaped while cut off that came back and wrote its users online
// again, then met a Redis that lost its data before its claimer saw it
// back, puts its records back quietly: its users end with online, offline,
// online, once each, whatever order the node and its claimer reach the new
// Redis in, and also when the new Redis is a replica that missed the
// node's return (it still holds the reap). And one that never came back
// before the loss owes its users' online edges, in either order.
func TestALifeEndedOnceIsOwedOnce(t *testing.T) {
	users := []any{"u", "x", 1, 0, "u", "y", 1, 0}
	for _, tc := range []struct {
		name         string
		returned     bool // a wrote its users again before the loss
		claimerFirst bool // b reaches the Redis after the loss before a
		replica      bool // the loss is a replica that missed a's return, not an empty Redis
		wantOnline   int
	}{
		{name: "returned, node first", returned: true, wantOnline: 2},
		{name: "returned, claimer first", returned: true, claimerFirst: true, wantOnline: 2},
		{name: "returned, replica missed it, node first", returned: true, replica: true, wantOnline: 2},
		{name: "returned, replica missed it, claimer first", returned: true, replica: true, claimerFirst: true, wantOnline: 2},
		{name: "not back, node first", wantOnline: 2},
		{name: "not back, claimer first", claimerFirst: true, wantOnline: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t)
			c := srv.client(t)
			ctx := context.Background()
			k := newShardKeys("s", 0)
			a, b := newLifeNode(t, c, k, "a"), newLifeNode(t, c, k, "b")
			require.Equal(t, int64(0), a.set("w", users...))
			b.set("w")
			b.claim() // the shard's first claim pauses
			expire(t, c, k, "a")
			b.claim()
			require.Equal(t, map[string]int{"x": 1, "y": 1}, b.offl, "b reaped a")

			// What a replica that missed a's return holds: the shard as it
			// was right after the reap.
			snapshot := map[string]string{}
			if tc.replica {
				for _, key := range k.keys {
					if dump, err := c.Dump(ctx, key).Result(); err == nil {
						snapshot[key] = dump
					}
				}
			}
			if tc.returned {
				require.Equal(t, int64(setOwed), a.set("w", users...), "a learns its life ended")
				require.Equal(t, int64(0), a.set("a", users...), "a writes its users again")
				require.Equal(t, map[string]int{"x": 2, "y": 2}, a.onl)
			}
			require.NoError(t, c.FlushAll(ctx).Err())
			for key, dump := range snapshot {
				require.NoError(t, c.Restore(ctx, key, 0, dump).Err())
			}

			steps := []func(){b.claim, func() { a.set("w") }}
			if !tc.claimerFirst {
				steps[0], steps[1] = steps[1], steps[0]
			}
			for _, step := range steps {
				step()
			}
			// a repairs as its writer would: a restore after a loss, a
			// reassert once its life ended; then b claims again.
			for range 3 {
				if a.restoreAfter {
					a.restoreAfter = false
					// Restored, or owed: b wrote back the reap first.
					assert.Contains(t, []int64{3, setOwed}, a.set("r", users...), "a restores")
				}
				// The restore window ends: every node restored by then.
				require.NoError(t, c.HDel(ctx, k.tag+":clock", "restore").Err())
				if a.set("w") == setOwed {
					require.Equal(t, int64(0), a.set("a", users...), "a writes its users again")
				}
				b.claim()
			}
			for _, uid := range []string{"x", "y"} {
				assert.Equal(t, tc.wantOnline, a.onl[uid]+b.onl[uid], "%s's online edges", uid)
				assert.Equal(t, 1, a.offl[uid]+b.offl[uid], "%s's offline edges", uid)
			}
			online, err := c.ZRange(ctx, k.online, 0, -1).Result()
			require.NoError(t, err)
			assert.Equal(t, []string{"x", "y"}, online, "a's users are online in Redis")
		})
	}
}
