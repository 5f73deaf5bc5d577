package cluster

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// logEntries reads every shard's log, T:log, as entries by shard.
func logEntries(t *testing.T, c redis.UniversalClient, keys []shardKeys) [][]redis.XMessage {
	t.Helper()
	out := make([][]redis.XMessage, len(keys))
	for s, k := range keys {
		msgs, err := c.XRange(context.Background(), k.tag+":log", "-", "+").Result()
		require.NoError(t, err)
		out[s] = msgs
	}
	return out
}

// splitEdgeID reads an Edge.ID as its shard and its log entry's ID.
func splitEdgeID(t *testing.T, prefix, id string) (int, string) {
	t.Helper()
	rest, ok := strings.CutPrefix(id, "evt_"+prefix+"_")
	require.True(t, ok, "edge ID %q", id)
	shard, entry, ok := strings.Cut(rest, "_")
	require.True(t, ok, "edge ID %q", id)
	s, err := strconv.Atoi(shard)
	require.NoError(t, err, "edge ID %q", id)
	return s, entry
}

// Every edge a node produces, whichever script made it (a write, a record's
// set, a claim of a dead node, a leave), is an entry of its shard's log,
// made in the same call, under the edge's ID, with the edge's fields; the
// log holds nothing else, and each shard that logged names its epoch.
func TestLogHoldsEveryProducedEdge(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	for i := range 6 {
		uid := "u" + strconv.Itoa(i)
		a.SetUser(uid, 1, 0)
		a.SetMember("room"+strconv.Itoa(i%3), uid, 1, false)
	}
	a.SetUser("u0", 1, 1) // away
	a.SetRecord("u1", protocol.Set{Mode: protocol.ModeDND})
	a.SetMember("room1", "u1", 0, false) // a leave
	b.SetUser("v", 1, 0)
	a.rec.waitFor(t, testWait, "a's edges", func() bool {
		a.rec.mu.Lock()
		defer a.rec.mu.Unlock()
		return len(a.rec.made) == 6+6+1+1+1
	})
	a.crash() // b reaps a's users: leaves and offlines
	b.rec.waitFor(t, testWait, "b reaped a", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return len(b.rec.made) == 1+5+6
	})
	require.NoError(t, b.Withdraw(context.Background())) // v's offline

	var made []presence.Edge
	for _, n := range []*node{a, b} {
		n.rec.mu.Lock()
		made = append(made, n.rec.made...)
		n.rec.mu.Unlock()
	}
	logs := logEntries(t, c, a.keys)
	byID := map[string]redis.XMessage{}
	total := 0
	for s, msgs := range logs {
		total += len(msgs)
		for _, m := range msgs {
			byID[strconv.Itoa(s)+"_"+m.ID] = m
		}
		if len(msgs) > 0 {
			epoch, err := c.HGet(context.Background(), a.keys[s].tag+":clock", "epoch").Result()
			require.NoError(t, err, "shard %d logged: it has an epoch", s)
			assert.Regexp(t, `^[0-9]{16,}$`, epoch)
		}
	}
	assert.Equal(t, len(made), total, "one entry per edge produced")
	for _, e := range made {
		s, entry := splitEdgeID(t, "t", e.ID)
		assert.Equal(t, a.edgeShard(e), s, "%v: the edge's shard", e)
		m, ok := byID[strconv.Itoa(s)+"_"+entry]
		if !assert.True(t, ok, "%v (%s) is in the log", e, e.ID) {
			continue
		}
		want := map[string]any{"k": e.Kind.String(), "u": e.UID, "t": strconv.FormatInt(e.At.UnixMilli(), 10)}
		if e.Channel != "" {
			want["c"] = e.Channel
		}
		if e.Kind == presence.EdgeUpdate {
			r, ok := m.Values["r"].(string)
			require.True(t, ok, "an update carries its record")
			var rec protocol.Record
			require.NoError(t, json.Unmarshal([]byte(r), &rec))
			assert.Equal(t, e.Record, rec)
			want["r"] = r
		}
		assert.Equal(t, want, m.Values, "%v: its entry's fields", e)
	}
}

// A shard's log keeps about its share of Log.Max entries, and an edge made
// after Log.Keep has passed drops the entries older than that (both trim
// whole nodes of the stream, so the test makes them small).
func TestLogRetention(t *testing.T) {
	srv := startRedis(t, "--stream-node-max-entries", "4")
	c := srv.client(t)
	cfg := testConfig(srv.client(t), "a")
	cfg.Log = presence.LogConfig{Max: 4 * 8, Keep: 300 * time.Millisecond} // 8 per shard
	a := startNode(t, cfg)
	k := a.keys[0]
	// Users of shard 0 only.
	var uids []string
	for i := 0; len(uids) < 40; i++ {
		if uid := "u" + strconv.Itoa(i); a.shard(uid) == 0 {
			uids = append(uids, uid)
		}
	}
	for _, uid := range uids {
		a.SetUser(uid, 1, 0)
		a.rec.waitFor(t, testWait, uid+" online", func() bool { return a.rec.producedCount(uid, true) == 1 })
	}
	n, err := c.XLen(context.Background(), k.tag+":log").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, n, int64(8+4), "about 8 kept of 40")
	assert.GreaterOrEqual(t, n, int64(8))

	last, err := c.XRevRangeN(context.Background(), k.tag+":log", "+", "-", 1).Result()
	require.NoError(t, err)
	require.Len(t, last, 1)
	lastMs, _, _ := strings.Cut(last[0].ID, "-")
	eventually(t, "Keep passed since the last entry", func(ct *assert.CollectT) {
		now, err := c.Time(context.Background()).Result()
		require.NoError(ct, err)
		assert.Greater(ct, now.UnixMilli(), mustInt(t, lastMs)+cfg.Log.Keep.Milliseconds())
	})
	a.SetUser(uids[0], 0, 0) // one more edge: it trims by age
	a.rec.waitFor(t, testWait, "offline", func() bool { return a.rec.producedCount(uids[0], false) == 1 })
	msgs, err := c.XRange(context.Background(), k.tag+":log", "-", "+").Result()
	require.NoError(t, err)
	require.NotEmpty(t, msgs)
	assert.Equal(t, "offline", msgs[len(msgs)-1].Values["k"])
	assert.LessOrEqual(t, len(msgs), 4, "only the newest node of the stream is left")
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

func TestNewRefusesABadLogConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	for _, lc := range []presence.LogConfig{{Keep: -time.Second}, {Max: -1}} {
		cfg := testConfig(c, "a")
		cfg.Log = lc
		_, err := New(cfg)
		assert.Error(t, err, "%+v", lc)
	}
}
