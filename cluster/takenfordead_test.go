package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node cut off past its lease is claimed, and the first write of its
// that reaches Redis afterwards finds it taken for dead; if the node never
// reads that reply (it gave up on the write, which Redis ran late), it
// must still learn it from what Redis holds, on its next write or renewal,
// and write its users back with their edges: Redis keeps the node's debt
// until it has.
func TestTakenForDeadSurvivesALostReply(t *testing.T) {
	srv := startRedis(t)
	b := startNode(t, testConfig(srv.client(t), "b"))
	p := startProxy(t, srv.addr())
	ca := redis.NewClient(&redis.Options{Addr: p.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = ca.Close() })
	a := startNode(t, testConfig(ca, "a"))
	b.follow(t, "frank", "#room")
	a.SetUser("frank", 1, 0)
	a.SetMember("room", "frank", 1, false)
	b.rec.waitFor(t, testWait, "frank online", func() bool { return b.rec.count("frank", true) == 1 })
	// Nothing of a's on its way when the link is cut: a failed write would
	// be written again anyway, with its edges, whatever Redis says.
	a.rec.waitFor(t, testWait, "a's writes landed", func() bool {
		n, _, err := b.Members(context.Background(), "room", "", 10)
		return err == nil && n == 1 && testutil.ToFloat64(a.m.pending) == 0
	})
	time.Sleep(2 * testRenew) // a renewal round or two, past its startup's writes

	p.cut(true)
	b.rec.waitFor(t, testWait, "frank offline after a's lease expired", func() bool { return b.rec.count("frank", false) == 1 })
	// a's renewal, sent before the cut and run by Redis only now: it finds
	// a taken for dead and renews it, and its reply never reaches a. (A
	// shard whose claims paused, as the claims before came late on a busy
	// machine, takes a for dead a round later: wait for every shard.)
	direct := srv.client(t)
	eventually(t, "a taken for dead in every shard", func(c *assert.CollectT) {
		for _, k := range a.keys {
			assert.ErrorIs(c, direct.ZScore(context.Background(), k.alive, a.cfg.Node).Err(), redis.Nil)
		}
	})
	for s, k := range a.keys {
		// tag, node, ttl, last-seen TTL, landed (0: no loss check), write
		// number (0: unnumbered, neither stale nor kept), window, mode
		args := []any{k.tag, a.cfg.Node, a.cfg.Timeout.Milliseconds(), a.cfg.LastSeenTTL.Milliseconds(), 0, 0,
			int64(1), "w"}
		res, err := scriptResult(setScript.Run(context.Background(), direct, k.keys, args...), 3)
		require.NoError(t, err)
		require.True(t, flag(res[0]), "shard %d: the late renewal finds a taken for dead", s)
	}
	p.cut(false)
	b.rec.waitFor(t, testWait, "frank online again", func() bool { return b.rec.count("frank", true) == 2 })
	b.rec.waitFor(t, testWait, "frank back in the room", func() bool {
		n, _, err := b.Members(context.Background(), "room", "", 10)
		return err == nil && n == 1
	})
}
