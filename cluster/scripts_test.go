package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// set runs setScript for node with records ("u", uid, n[, away] or "m",
// channel, uid, 1|0[, away 1|0]; a missing away is 0). It returns whether
// the node had been taken for dead, and the online and offline edges as
// uid, 1|0, ...
func set(t *testing.T, c redis.UniversalClient, k shardKeys, node string, ttl time.Duration, recs ...any) (bool, []any) {
	t.Helper()
	back, edges := setEdges(t, c, k, node, ttl, recs...)
	return back, userEdges(edges)
}

// setEdges is set returning every edge the script made, as kind, uid,
// channel, ms, outbox id, ...
func setEdges(t *testing.T, c redis.UniversalClient, k shardKeys, node string, ttl time.Duration, recs ...any) (bool, []any) {
	t.Helper()
	args := append([]any{k.tag, node, ttl.Milliseconds(), int64(time.Hour / time.Millisecond), 0, 0, 0, "w", lifeOf(t, c, k, node), 0, ""},
		fullRecords(recs)...)
	res, err := scriptResult(setScript.Run(context.Background(), c, k.keys, args...), setHead)
	require.NoError(t, err)
	return flag(res[0]), res[setHead:]
}

// lifeOf is the life node carries in a test's calls: the one Redis holds of
// it, as a node that heard every reply would, or its first.
func lifeOf(t *testing.T, c redis.UniversalClient, k shardKeys, node string) int64 {
	t.Helper()
	life, err := c.HGet(context.Background(), k.tag+":life", node).Int64()
	if errors.Is(err, redis.Nil) {
		return 1
	}
	require.NoError(t, err)
	return life
}

// fullRecords adds away 0 to the records that leave it out.
func fullRecords(recs []any) []any {
	var out []any
	for i := 0; i < len(recs); {
		width := 3 // "u", uid, n
		if recs[i] == "m" {
			width = 4
		}
		out = append(out, recs[i:i+width]...)
		i += width
		if i < len(recs) {
			if _, tag := recs[i].(string); !tag {
				out = append(out, recs[i])
				i++
				continue
			}
		}
		out = append(out, 0)
	}
	return out
}

// userEdges picks the online and offline edges out of a script's edges, as
// uid, 1|0, ...
func userEdges(edges []any) []any {
	out := []any{}
	for i := 0; i+4 < len(edges); i += 5 {
		switch edges[i] {
		case "online":
			out = append(out, edges[i+1], int64(1))
		case "offline":
			out = append(out, edges[i+1], int64(0))
		}
	}
	return out
}

// claim runs claimScript as the engine does: it returns {back, paused, more}
// and the online and offline edges as uid, 1|0, ...
func claim(c redis.UniversalClient, k shardKeys, by string, limit int, gap, pause time.Duration) ([]bool, []any, error) {
	res, err := scriptResult(claimScript.Run(context.Background(), c, k.keys, k.tag, by, int64(60000), limit,
		gap.Milliseconds(), pause.Milliseconds(), int64(time.Hour/time.Millisecond)), 3)
	if err != nil {
		return nil, nil, err
	}
	return []bool{flag(res[0]), flag(res[1]), flag(res[2])}, userEdges(res[claimHead:]), nil
}

// channelMembers reads channel's members from the shard's T:c.
func channelMembers(ctx context.Context, c redis.UniversalClient, k shardKeys, channel string) ([]string, error) {
	min, max := memberBounds(channel, "")
	recs, err := c.ZRangeByLex(ctx, k.members, &redis.ZRangeBy{Min: min, Max: max}).Result()
	for i, rec := range recs {
		recs[i] = rec[len(channel)+1:]
	}
	return recs, err
}

// topicEvents subscribes to sharded Pub/Sub channels and collects what arrives.
type topicEvents struct {
	mu  sync.Mutex
	got map[string][]wireEvent
	ps  *redis.PubSub
}

func listen(t *testing.T, c redis.UniversalClient, channels ...string) *topicEvents {
	t.Helper()
	te := &topicEvents{got: map[string][]wireEvent{}, ps: c.SSubscribe(context.Background(), channels...)}
	t.Cleanup(func() { _ = te.ps.Close() })
	for range channels {
		_, err := te.ps.Receive(context.Background()) // the confirmations
		require.NoError(t, err)
	}
	go func() {
		for m := range te.ps.Channel() {
			var ev wireEvent
			if json.Unmarshal([]byte(m.Payload), &ev) == nil {
				te.mu.Lock()
				te.got[m.Channel] = append(te.got[m.Channel], ev)
				te.mu.Unlock()
			}
		}
	}()
	return te
}

// all returns every event published on channel so far. It publishes a
// marker there and waits for it: Pub/Sub delivers a channel's messages to a
// subscriber in the order they were published.
func (te *topicEvents) all(t *testing.T, c redis.UniversalClient, channel string) []wireEvent {
	t.Helper()
	require.NoError(t, c.SPublish(context.Background(), channel, `{"s":-1}`).Err())
	var got []wireEvent
	require.Eventually(t, func() bool {
		te.mu.Lock()
		got = slices.Clone(te.got[channel])
		te.mu.Unlock()
		return len(got) > 0 && got[len(got)-1].S == -1
	}, testWait, 5*time.Millisecond, "the marker on %s", channel)
	return got[:len(got)-1]
}

func TestSetScriptEdgesAndCounts(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	ctx := context.Background()
	ev := listen(t, c, k.userTopic("u"), k.channelTopic("lobby"))
	steps := []struct {
		node      string
		uid       string
		n         int
		wantConns int
		wantNodes int
		wantEdges []any
	}{
		{"a", "u", 1, 1, 1, []any{"u", int64(1)}},
		{"a", "u", 1, 1, 1, []any{}},
		{"a", "u", 3, 3, 1, []any{}},
		{"b", "u", 2, 5, 2, []any{}},
		{"a", "u", 0, 2, 1, []any{}},
		{"a", "u", 0, 2, 1, []any{}}, // dropping twice is harmless
		{"b", "u", 0, 0, 0, []any{"u", int64(0)}},
		{"b", "u", 1, 1, 1, []any{"u", int64(1)}},
	}
	for i, st := range steps {
		_, edges := set(t, c, k, st.node, time.Minute, "u", st.uid, st.n)
		assert.Equal(t, st.wantEdges, edges, "step %d", i)
		conns, _ := c.HGet(ctx, k.conns, st.uid).Int()
		nodes, _ := c.HGet(ctx, k.tag+":nodes", st.uid).Int()
		assert.Equal(t, st.wantConns, conns, "conns at step %d", i)
		assert.Equal(t, st.wantNodes, nodes, "nodes at step %d", i)
		_, err := c.ZScore(ctx, k.online, st.uid).Result()
		assert.Equal(t, st.wantNodes > 0, err == nil, "online at step %d", i)
	}
	// Memberships: a join edge for the first node, a leave for the last.
	set(t, c, k, "a", time.Minute, "m", "lobby", "u", 1, "m", "lobby", "v", 1)
	set(t, c, k, "b", time.Minute, "m", "lobby", "u", 1)
	set(t, c, k, "a", time.Minute, "m", "lobby", "u", 0, "m", "lobby", "u", 0)
	set(t, c, k, "b", time.Minute, "m", "lobby", "u", 0)
	members, err := channelMembers(ctx, c, k, "lobby")
	require.NoError(t, err)
	assert.Equal(t, []string{"v"}, members)

	var on []int
	for _, e := range ev.all(t, c, k.userTopic("u")) {
		on = append(on, e.On)
	}
	assert.Equal(t, []int{1, 0, 1}, on)
	var joins []string
	var seqs []int64
	for _, e := range ev.all(t, c, k.channelTopic("lobby")) {
		joins = append(joins, fmt.Sprintf("%s%d", e.UID, e.Joined))
		seqs = append(seqs, e.S)
	}
	assert.Equal(t, []string{"u1", "v1", "u0"}, joins)
	assert.IsIncreasing(t, seqs, "edges carry the shard's counter")
}

// Every write of a node the shard took for dead says so until the node
// has written its records again (mode "a"): a reply that says it may be
// lost. A node new to the shard owes nothing, nor does one meeting a Redis
// that lost everything (check finds that loss, by the node's write count).
func TestSetScriptSaysWhenTheNodeWasLost(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	ctx := context.Background()
	k := newShardKeys("s", 0)
	back, _ := set(t, c, k, "a", time.Minute, "u", "x", 1)
	assert.False(t, back, "first write")

	require.NoError(t, c.ZAdd(ctx, k.alive, redis.Z{Score: 1, Member: "a"}).Err()) // a's lease long gone
	for range 2 {                                                                  // the shard's first claim pauses
		_, _, err := claim(c, k, "b", 100, time.Hour, 0)
		require.NoError(t, err)
	}
	require.NoError(t, c.ZScore(ctx, k.tag+":reaped", "a").Err(), "a reaped")
	back, _ = set(t, c, k, "a", time.Minute)
	assert.True(t, back, "a renewal after the shard took the node for dead")
	back, _ = set(t, c, k, "a", time.Minute)
	assert.True(t, back, "and again, as the reply may have been lost")
	writtenAgain(t, c, k, "a")
	back, _ = set(t, c, k, "a", time.Minute)
	assert.False(t, back, "once written again")

	require.NoError(t, c.FlushAll(ctx).Err())
	back, _ = set(t, c, k, "a", time.Minute)
	assert.False(t, back, "after Redis lost everything")
}

// writtenAgain runs setScript in mode "a" with no records, as a node whose
// shard has none of its records tells Redis it has written them again.
func writtenAgain(t *testing.T, c redis.UniversalClient, k shardKeys, node string) {
	t.Helper()
	res, err := scriptResult(setScript.Run(context.Background(), c, k.keys, k.tag, node, time.Minute.Milliseconds(),
		int64(time.Hour/time.Millisecond), 0, 0, 0, "a", lifeOf(t, c, k, node)+1), setHead)
	require.NoError(t, err)
	assert.False(t, flag(res[0]), "written again: no longer taken for dead")
}

// Many goroutines, each a node, change records at random: afterwards the
// counters in Redis match what the nodes hold, and each topic's edges
// alternate.
func TestSetScriptConcurrentInvariants(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	const nodes, users, ops = 8, 20, 200
	var topics []string
	for u := range users {
		topics = append(topics, k.userTopic("u"+strconv.Itoa(u)))
	}
	ev := listen(t, c, append(topics, k.channelTopic("room"))...)
	finals := make([]map[string]int, nodes)
	rooms := make([]map[string]bool, nodes)
	var wg sync.WaitGroup
	for g := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			local, room := map[string]int{}, map[string]bool{}
			for range ops {
				var recs []any
				for range 1 + rng.IntN(4) {
					uid := "u" + strconv.Itoa(rng.IntN(users))
					if rng.IntN(2) == 0 {
						n := rng.IntN(4)
						local[uid] = n
						recs = append(recs, "u", uid, n)
					} else {
						in := rng.IntN(2)
						room[uid] = in == 1
						recs = append(recs, "m", "room", uid, in)
					}
				}
				args := append([]any{k.tag, "n" + strconv.Itoa(g), int64(60000), int64(60000), 0, 0, 0, "w", 1, 0, ""}, fullRecords(recs)...)
				if _, err := scriptResult(setScript.Run(context.Background(), c, k.keys, args...), 1); !assert.NoError(t, err) {
					return
				}
			}
			finals[g], rooms[g] = local, room
		}()
	}
	wg.Wait()
	ctx := context.Background()
	wantMembers := []string{}
	for u := range users {
		uid := "u" + strconv.Itoa(u)
		conns, holders, inRoom := 0, 0, false
		for g := range nodes {
			if n := finals[g][uid]; n > 0 {
				conns += n
				holders++
			}
			inRoom = inRoom || rooms[g][uid]
		}
		gotConns, _ := c.HGet(ctx, k.conns, uid).Int()
		gotNodes, _ := c.HGet(ctx, k.tag+":nodes", uid).Int()
		assert.Equal(t, conns, gotConns, "conns of %s", uid)
		assert.Equal(t, holders, gotNodes, "nodes of %s", uid)
		_, err := c.ZScore(ctx, k.online, uid).Result()
		assert.Equal(t, holders > 0, err == nil, "online set has %s", uid)
		if inRoom {
			wantMembers = append(wantMembers, uid)
		}
		last := 0
		for i, e := range ev.all(t, c, k.userTopic(uid)) {
			require.NotEqual(t, last, e.On, "edge %d of %s repeats", i, uid)
			last = e.On
		}
		assert.Equal(t, holders > 0, last == 1, "last edge of %s", uid)
	}
	members, err := channelMembers(ctx, c, k, "room")
	require.NoError(t, err)
	assert.ElementsMatch(t, wantMembers, members)
}

// Claimers racing over a dead node's records: each record is reaped, and
// each edge emitted, exactly once; a user or member also held by a live node
// stays.
func TestClaimRaceExactlyOnce(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	const users = 2000
	ev := listen(t, c, k.channelTopic("lobby"))
	for i := 0; i < users; i += 250 {
		var recs []any
		for j := i; j < i+250; j++ {
			recs = append(recs, "u", "u"+strconv.Itoa(j), 1, "m", "lobby", "u"+strconv.Itoa(j), 1)
		}
		set(t, c, k, "ghost", time.Millisecond, recs...)
	}
	// A live node shares u0 and its membership.
	set(t, c, k, "alive", time.Minute, "u", "u0", 1, "m", "lobby", "u0", 1)
	time.Sleep(5 * time.Millisecond)
	state, _, err := claim(c, k, "warmup", 1, time.Hour, 0) // the first claim ever starts the clock
	require.NoError(t, err)
	require.True(t, state[1], "paused")

	const claimers = 8
	offline := make([]map[string]int, claimers)
	var wg sync.WaitGroup
	for g := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offline[g] = map[string]int{}
			for {
				state, edges, err := claim(c, k, "c"+strconv.Itoa(g), 37, time.Hour, 0)
				if !assert.NoError(t, err) {
					return
				}
				for i := 0; i < len(edges); i += 2 {
					offline[g][edges[i].(string)]++
				}
				if !state[2] {
					return
				}
			}
		}()
	}
	wg.Wait()
	total := map[string]int{}
	winners := 0
	for g := range claimers {
		if len(offline[g]) > 0 {
			winners++
		}
		for uid, n := range offline[g] {
			total[uid] += n
		}
	}
	t.Logf("%d claimers shared the work", winners)
	assert.Len(t, total, users-1, "u0 stays online through node alive")
	for uid, n := range total {
		require.Equal(t, 1, n, "offline edges of %s", uid)
	}
	leaves := map[string]int{}
	for _, e := range ev.all(t, c, k.channelTopic("lobby")) {
		if e.Joined == 0 {
			leaves[e.UID]++
		}
	}
	assert.Len(t, leaves, users-1)
	for uid, n := range leaves {
		require.Equal(t, 1, n, "leave edges of %s", uid)
	}
	ctx := context.Background()
	n, err := c.ZCard(ctx, k.online).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)
	members, err := channelMembers(ctx, c, k, "lobby")
	require.NoError(t, err)
	assert.Equal(t, []string{"u0"}, members)
	dead, err := c.SCard(ctx, k.tag+":dead").Result()
	require.NoError(t, err)
	assert.Zero(t, dead, "a reaped node leaves the dead set")
}

// After a stall longer than the gap, claims pause for one renewal round, so a
// live node can renew before it is taken for dead.
func TestClaimPausesAfterStall(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)
	// A claim late by more than the pause lands past the gap and pauses
	// again, so a slow machine delays the test but cannot fail it.
	const gap, pause = 400 * time.Millisecond, 400 * time.Millisecond
	set(t, c, k, "a", 100*time.Millisecond, "u", "x", 1)
	state, _, err := claim(c, k, "b", 10, gap, pause)
	require.NoError(t, err)
	require.True(t, state[1], "the first claim starts the clock")

	srv.freeze(true)
	time.Sleep(3 * gap)
	srv.freeze(false)
	state, _, err = claim(c, k, "b", 10, gap, pause)
	require.NoError(t, err)
	assert.True(t, state[1], "claim right after the stall")
	state, _, err = claim(c, k, "b", 10, gap, pause)
	require.NoError(t, err)
	assert.True(t, state[1], "claim during the pause")

	// The pause ends; claims every gap/4 keep the clock going.
	deadline := time.Now().Add(20 * time.Second)
	var edges []any
	for {
		time.Sleep(gap / 4)
		state, edges, err = claim(c, k, "b", 10, gap, pause)
		require.NoError(t, err)
		if !state[1] {
			break
		}
		require.True(t, time.Now().Before(deadline), "claims never resumed")
	}
	assert.Equal(t, []any{"x", int64(0)}, edges)
}
