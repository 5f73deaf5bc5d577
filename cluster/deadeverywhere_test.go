package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// A node whose liveness ran out in one shard is dead in all of them, within
// one claim: its liveness in the others, renewed in the same round, runs
// out moments later, and a claim that reaped the first shard's users
// before the others' memberships would send a user's offline before its
// leaves. Here the other shards' liveness is pushed an hour on, so only
// the first shard's running out can tell the claim.
func TestANodeDeadInOneShardIsDeadInAll(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	ctx := context.Background()
	a := startNode(t, testConfig(srv.client(t), "a"))
	a.SetUser("u", 1, 0)
	for i := range 8 { // memberships in several shards, most of them not u's
		a.SetMember(fmt.Sprintf("ch%d", i), "u", 1, false)
	}
	b := startNode(t, testConfig(srv.client(t), "b"))
	a.rec.waitFor(t, testWait, "u online and in every channel", func() bool {
		for i := range 8 {
			if n, _, err := b.Members(ctx, fmt.Sprintf("ch%d", i), "", 1); err != nil || n != 1 {
				return false
			}
		}
		return true
	})
	a.crash()

	// Find a's name in Redis, and the shard of u's record.
	var name string
	home := -1
	for s := range 4 {
		k := newShardKeys("t", s)
		recs, err := c.ZRange(ctx, k.tag+":ui", 0, -1).Result()
		require.NoError(t, err)
		for _, r := range recs {
			if node, uid, _ := strings.Cut(r, " "); uid == "u" && strings.HasPrefix(node, a.Node()) {
				name, home = node, s
			}
		}
	}
	require.NotEqual(t, -1, home, "u's record is in Redis")
	for s := range 4 {
		if s != home {
			require.NoError(t, c.ZAdd(ctx, newShardKeys("t", s).alive,
				redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: name}).Err())
		}
	}

	b.rec.waitFor(t, testWait, "u offline", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return countKind(b.rec.made, presence.EdgeOffline) == 1
	})
	b.rec.mu.Lock()
	made := append([]presence.Edge(nil), b.rec.made...)
	b.rec.mu.Unlock()
	var kinds []string
	for _, e := range made {
		kinds = append(kinds, e.Kind.String())
	}
	assert.Equal(t, append(strings.Split(strings.Repeat("leave ", 8), " ")[:8], "offline"), kinds,
		"every leave, then the offline, in one claim")
}
