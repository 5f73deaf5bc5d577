package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// setLeases runs setScript for node with (uid, n) pairs and a lease of ttl.
func setLeases(t *testing.T, c redis.UniversalClient, k shardKeys, node string, ttl time.Duration, pairs ...any) []int64 {
	t.Helper()
	args := append([]any{node, ttl.Milliseconds(), 100000, 0}, pairs...)
	res, err := scriptResult(setScript.Run(context.Background(), c, k.all, args...), 4)
	require.NoError(t, err)
	return res
}

// claimLeases runs claimScript; gap and pause as the engine passes them.
func claimLeases(c redis.UniversalClient, k shardKeys, by string, limit int, gap, pause time.Duration) ([]int64, error) {
	return scriptResult(claimScript.Run(context.Background(), c, k.claim, by, 100000, limit,
		gap.Milliseconds(), pause.Milliseconds()), 3)
}

// streamEdges returns the edges in a shard's stream, in order.
func streamEdges(t *testing.T, c redis.UniversalClient, k shardKeys) []edgeEvent {
	t.Helper()
	var out []edgeEvent
	for _, e := range streamEntries(t, c, k) {
		out = append(out, e.edgeEvent)
	}
	return out
}

func TestSetScriptEdgesAndCounts(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	ctx := context.Background()
	steps := []struct {
		node       string
		uid        string
		n          int
		wantConns  int
		wantLeases int
		wantRes    []int64 // added, dropped, online edges, offline edges
	}{
		{"a", "u", 1, 1, 1, []int64{1, 0, 1, 0}},
		{"a", "u", 1, 1, 1, []int64{0, 0, 0, 0}}, // a renewal
		{"a", "u", 3, 3, 1, []int64{0, 0, 0, 0}},
		{"b", "u", 2, 5, 2, []int64{1, 0, 0, 0}},
		{"a", "u", 0, 2, 1, []int64{0, 1, 0, 0}},
		{"a", "u", 0, 2, 1, []int64{0, 0, 0, 0}}, // dropping twice is harmless
		{"b", "u", 0, 0, 0, []int64{0, 1, 0, 1}},
		{"b", "u", 1, 1, 1, []int64{1, 0, 1, 0}},
	}
	for i, st := range steps {
		res := setLeases(t, c, k, st.node, time.Minute, st.uid, st.n)
		assert.Equal(t, st.wantRes, res, "step %d", i)
		conns, _ := c.HGet(ctx, k.conns, st.uid).Int()
		leases, _ := c.HGet(ctx, k.nodes, st.uid).Int()
		assert.Equal(t, st.wantConns, conns, "conns at step %d", i)
		assert.Equal(t, st.wantLeases, leases, "leases at step %d", i)
		online, err := c.ZScore(ctx, k.online, st.uid).Result()
		assert.Equal(t, st.wantLeases > 0, err == nil, "online at step %d (%v %v)", i, online, err)
	}
	assert.Equal(t, []edgeEvent{{"u", true}, {"u", false}, {"u", true}}, streamEdges(t, c, k))
}

// A renewal costs one ZADD when every lease is there, and adds back, with
// its edge, a lease that Redis lost.
func TestSetScriptRenewal(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	ctx := context.Background()
	renew := func(pairs ...any) []int64 {
		res, err := scriptResult(setScript.Run(ctx, c, k.all, append([]any{"a", int64(60000), 100000, 1}, pairs...)...), 4)
		require.NoError(t, err)
		return res
	}
	setLeases(t, c, k, "a", time.Second, "u", 2, "v", 1)
	before, err := c.ZScore(ctx, k.leases, "a|u").Result()
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0, 0, 0}, renew("u", 2, "v", 1))
	after, err := c.ZScore(ctx, k.leases, "a|u").Result()
	require.NoError(t, err)
	assert.Greater(t, after, before+50000, "renewed to the longer ttl")

	require.NoError(t, c.FlushAll(ctx).Err()) // Redis lost everything
	assert.Equal(t, []int64{2, 0, 2, 0}, renew("u", 2, "v", 1))
	conns, err := c.HGet(ctx, k.conns, "u").Int()
	require.NoError(t, err)
	assert.Equal(t, 2, conns)
	assert.Equal(t, []edgeEvent{{"u", true}, {"v", true}}, streamEdges(t, c, k))

	// A drop in a renewal batch takes the full path.
	assert.Equal(t, []int64{0, 1, 0, 1}, renew("u", 2, "v", 0))
}

// Many goroutines, each a node, change leases at random: afterwards Redis
// holds exactly the sums of what they set, and each user's edges alternate.
func TestSetScriptConcurrentInvariants(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	const nodes, users, ops = 8, 20, 200
	finals := make([]map[string]int, nodes)
	var wg sync.WaitGroup
	for g := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			local := map[string]int{}
			for range ops {
				var pairs []any
				renewal := rng.IntN(3) == 0
				if renewal { // what the engine renews: the leases it holds, as last set
					for uid, n := range local {
						if n > 0 && len(pairs) < 8 {
							pairs = append(pairs, uid, n)
						}
					}
				} else {
					for range 1 + rng.IntN(4) {
						uid := "u" + strconv.Itoa(rng.IntN(users))
						n := rng.IntN(4)
						local[uid] = n
						pairs = append(pairs, uid, n)
					}
				}
				flag := 0
				if renewal {
					flag = 1
				}
				_, err := scriptResult(setScript.Run(context.Background(), c, k.all,
					append([]any{"n" + strconv.Itoa(g), int64(60000), 100000, flag}, pairs...)...), 4)
				if !assert.NoError(t, err) {
					return
				}
			}
			finals[g] = local
		}()
	}
	wg.Wait()
	ctx := context.Background()
	wantOnline := map[string]bool{}
	for u := range users {
		uid := "u" + strconv.Itoa(u)
		conns, leases := 0, 0
		for g := range nodes {
			if n := finals[g][uid]; n > 0 {
				conns += n
				leases++
				got, err := c.HGet(ctx, k.lconns, fmt.Sprintf("n%d|%s", g, uid)).Int()
				require.NoError(t, err)
				assert.Equal(t, n, got)
			}
		}
		gotConns, _ := c.HGet(ctx, k.conns, uid).Int()
		gotLeases, _ := c.HGet(ctx, k.nodes, uid).Int()
		assert.Equal(t, conns, gotConns, "conns of %s", uid)
		assert.Equal(t, leases, gotLeases, "leases of %s", uid)
		wantOnline[uid] = leases > 0
	}
	zleases, err := c.ZCard(ctx, k.leases).Result()
	require.NoError(t, err)
	hleases, err := c.HLen(ctx, k.lconns).Result()
	require.NoError(t, err)
	assert.Equal(t, zleases, hleases)

	last := map[string]bool{}
	for _, e := range streamEdges(t, c, k) {
		require.NotEqual(t, last[e.uid], e.on, "edge of %s repeats", e.uid)
		last[e.uid] = e.on
	}
	for uid, on := range wantOnline {
		assert.Equal(t, on, last[uid], "last edge of %s", uid)
		_, err := c.ZScore(ctx, k.online, uid).Result()
		assert.Equal(t, on, err == nil, "online set has %s", uid)
	}
}

// Claimers racing over the same expired leases: each lease is claimed, and
// each offline edge written, exactly once.
func TestClaimRaceExactlyOnce(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	const leases = 2000
	for i := 0; i < leases; i += 500 {
		var pairs []any
		for j := i; j < i+500; j++ {
			pairs = append(pairs, "u"+strconv.Itoa(j), 1)
		}
		setLeases(t, c, k, "ghost", time.Millisecond, pairs...)
	}
	// A live user on another node, whose lease must survive the claims.
	setLeases(t, c, k, "alive", time.Minute, "u0", 1)
	time.Sleep(5 * time.Millisecond)
	res, err := claimLeases(c, k, "warmup", 1, time.Hour, 0) // first claim ever: starts the clock
	require.NoError(t, err)
	require.Equal(t, []int64{0, 0, 1}, res)

	const claimers = 8
	claimed := make([]int64, claimers)
	offline := make([]int64, claimers)
	var wg sync.WaitGroup
	for g := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := claimLeases(c, k, "c"+strconv.Itoa(g), 37, time.Hour, 0)
				if !assert.NoError(t, err) || res[0] == 0 {
					return
				}
				claimed[g] += res[0]
				offline[g] += res[1]
			}
		}()
	}
	wg.Wait()
	var sumClaimed, sumOffline int64
	winners := 0
	for g := range claimers {
		sumClaimed += claimed[g]
		sumOffline += offline[g]
		if claimed[g] > 0 {
			winners++
		}
	}
	assert.EqualValues(t, leases, sumClaimed)
	assert.EqualValues(t, leases-1, sumOffline, "u0 stays online through node alive")
	t.Logf("%d claimers shared the work: %v", winners, claimed)

	seen := map[string]int{}
	for _, e := range streamEdges(t, c, k) {
		if !e.on {
			seen[e.uid]++
		}
	}
	assert.Len(t, seen, leases-1)
	for uid, n := range seen {
		require.Equal(t, 1, n, "offline edges of %s", uid)
	}
	ctx := context.Background()
	n, err := c.ZCard(ctx, k.online).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)
	conns, err := c.HGet(ctx, k.conns, "u0").Int()
	require.NoError(t, err)
	assert.Equal(t, 1, conns)
}

// After a stall longer than the gap, claims pause for one renewal round, so a
// live node can renew before its leases are taken for a dead node's.
func TestClaimPausesAfterStall(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	// A claim late by more than the pause lands past the gap and pauses
	// again, so a slow machine delays the test but cannot fail it.
	const gap, pause = 400 * time.Millisecond, 400 * time.Millisecond
	setLeases(t, c, k, "a", 100*time.Millisecond, "x", 1)
	res, err := claimLeases(c, k, "b", 10, gap, pause)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 0, 1}, res, "the first claim starts the clock")

	srv.freeze(true)
	time.Sleep(3 * gap)
	srv.freeze(false)
	res, err = claimLeases(c, k, "b", 10, gap, pause)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0, 1}, res, "claim right after the stall")
	res, err = claimLeases(c, k, "b", 10, gap, pause)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0, 1}, res, "claim during the pause")

	// The pause ends; claims every gap/2 keep the clock going.
	deadline := time.Now().Add(20 * time.Second)
	for {
		time.Sleep(gap / 4)
		res, err = claimLeases(c, k, "b", 10, gap, pause)
		require.NoError(t, err)
		if res[2] == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "claims never resumed")
	}
	assert.Equal(t, []int64{1, 1, 0}, res)
	assert.Equal(t, []edgeEvent{{"x", true}, {"x", false}}, streamEdges(t, c, k))
}
