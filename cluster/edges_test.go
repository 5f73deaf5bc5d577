package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// testAppend appends an entry to a shard's log as the scripts that make
// edges do: its ID at Redis's time in ms, after the last one, and the
// log's epoch set once. KEYS: T:log, T:clock. ARGV: field, value, ...
var testAppend = redis.NewScript(`
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSETNX', KEYS[2], 'epoch', t[1] .. t[2])
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if last then ms = math.max(ms, tonumber(string.match(last[1], '^(%d+)'))) end
return redis.call('XADD', KEYS[1], string.format('%.0f', ms) .. '-*', unpack(ARGV))
`)

// logEngine is an engine on srv for reading the log, with shards shards.
func logEngine(t testing.TB, c redis.UniversalClient, shards int) *Engine {
	t.Helper()
	cfg := testConfig(c, "reader")
	cfg.Shards = shards
	e, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(e.crash)
	return e
}

// appendEdge appends an edge of kind to shard's log, and returns its
// Edge.ID.
func appendEdge(t *testing.T, e *Engine, shard int, kind, uid, channel string) string {
	t.Helper()
	id, err := tryAppendEdge(e, shard, kind, uid, channel)
	require.NoError(t, err)
	return id
}

// tryAppendEdge is appendEdge for a goroutine of the test's: it returns
// its error.
func tryAppendEdge(e *Engine, shard int, kind, uid, channel string) (string, error) {
	k := e.keys[shard]
	args := []any{"k", kind, "u", uid, "t", strconv.FormatInt(time.Now().UnixMilli(), 10)}
	if channel != "" {
		args = append(args, "c", channel)
	}
	if kind == "update" {
		args = append(args, "r", `{"info":{"n":1}}`)
	}
	id, err := testAppend.Run(context.Background(), e.rdb, []string{k.logKey(), k.tag + ":clock"}, args...).Text()
	if err != nil {
		return "", fmt.Errorf("append %s of %s to shard %d: %w", kind, uid, shard, err)
	}
	return e.edgeIDOf(shard, id), nil
}

func (b *base) edgeIDOf(shard int, entry string) string {
	return "evt_" + b.cfg.Prefix + "_" + strconv.Itoa(shard) + "_" + entry
}

// edgeKey is the merged order of an Edge.ID: (ms, n, shard).
func edgeKey(t require.TestingT, prefix, id string) logKey {
	rest, ok := strings.CutPrefix(id, "evt_"+prefix+"_")
	require.True(t, ok, "edge ID %q", id)
	shard, entry, _ := strings.Cut(rest, "_")
	s, err := strconv.Atoi(shard)
	require.NoError(t, err, "edge ID %q", id)
	p, err := parseEntryID(entry)
	require.NoError(t, err, "edge ID %q", id)
	return logKey{p.ms, p.n, s}
}

// replay reads edges from cursor in pages of limit until it has want of
// them or the deadline passes, and returns them with the cursor after.
func replay(t *testing.T, e *Engine, cursor string, limit, want int) ([]presence.Edge, string) {
	t.Helper()
	var all []presence.Edge
	deadline := time.Now().Add(testWait)
	for len(all) < want {
		page, next, err := e.Edges(context.Background(), cursor, limit)
		require.NoError(t, err, "Edges after %q", cursor)
		require.LessOrEqual(t, len(page), limit)
		if len(page) == 0 {
			if cursor != "" {
				require.Equal(t, cursor, next, "an empty page keeps its cursor")
			}
			require.False(t, time.Now().After(deadline), "replay has %d of %d edges after %v", len(all), want, testWait)
			time.Sleep(20 * time.Millisecond) // the next entries settle
		}
		all, cursor = append(all, page...), next
	}
	return all, cursor
}

// assertMergedOrder checks that edges come each once, in the log's order.
func assertMergedOrder(t *testing.T, prefix string, edges []presence.Edge) {
	t.Helper()
	for i := 1; i < len(edges); i++ {
		prev, cur := edgeKey(t, prefix, edges[i-1].ID), edgeKey(t, prefix, edges[i].ID)
		require.True(t, prev.less(cur), "edge %d %s after %s", i, edges[i].ID, edges[i-1].ID)
	}
}

// Entries appended to four shards while a reader reads them in pages of
// a few: each comes once, in the merged order, with its fields.
func TestEdgesReplayWhileWriting(t *testing.T) {
	srv := startRedis(t)
	e := logEngine(t, srv.client(t), 4)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	kinds := []string{"online", "offline", "join", "leave", "away", "active", "update"}
	const total = 600
	written := make(chan string, total)
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		defer close(written)
		for i := range total {
			kind := kinds[rng.IntN(len(kinds))]
			channel := ""
			if kind == "join" || kind == "leave" {
				channel = "room"
			}
			id, err := tryAppendEdge(e, rng.IntN(4), kind, fmt.Sprintf("u%d", i), channel)
			if err != nil {
				werr = err
				return
			}
			written <- id
		}
	})
	t.Cleanup(wg.Wait)
	all, _ := replay(t, e, "", 7, total)
	wg.Wait()
	require.NoError(t, werr)
	assertMergedOrder(t, "t", all)
	want := map[string]bool{}
	for id := range written {
		want[id] = true
	}
	got := map[string]bool{}
	for _, ed := range all {
		got[ed.ID] = true
		assert.NotZero(t, ed.Kind, "kind of %s", ed.ID)
		assert.WithinDuration(t, time.Now(), ed.At, time.Minute, "time of %s", ed.ID)
		if ed.Kind == presence.EdgeUpdate {
			assert.JSONEq(t, `{"n":1}`, string(ed.Record.Info), "record of %s", ed.ID)
		}
		if ed.Kind == presence.EdgeJoin || ed.Kind == presence.EdgeLeave {
			assert.Equal(t, "room", ed.Channel, "channel of %s", ed.ID)
		}
	}
	assert.Equal(t, want, got, "seed %d", seed)
}

// The settle frontier: an entry younger than a second waits for a later
// read, and the page still reaches its limit from the older entries.
func TestEdgesSettle(t *testing.T) {
	srv := startRedis(t)
	e := logEngine(t, srv.client(t), 2)
	var ids []string
	for i := range 30 {
		ids = append(ids, appendEdge(t, e, i%2, "online", fmt.Sprintf("u%d", i), ""))
	}
	page, cursor, err := e.Edges(context.Background(), "", 10)
	require.NoError(t, err)
	if len(page) > 0 {
		// A loaded machine took over a second to append them: the oldest are settled.
		age := time.Since(page[len(page)-1].At)
		assert.Greater(t, age, 900*time.Millisecond, "an edge handed on before it settled")
	}
	all, _ := replay(t, e, cursor, 10, 30-len(page))
	all = append(page, all...)
	var got []string
	for _, ed := range all {
		got = append(got, ed.ID)
	}
	assert.ElementsMatch(t, ids, got)
	assertMergedOrder(t, "t", all)
}

// A shard with the whole log: its reads are cut by what the page lacks,
// not by its share, so the pages come full.
func TestEdgesPagesFullFromOneShard(t *testing.T) {
	srv := startRedis(t)
	e := logEngine(t, srv.client(t), 16)
	for i := range 300 {
		appendEdge(t, e, 3, "online", fmt.Sprintf("u%d", i), "")
	}
	for i := range 5 {
		appendEdge(t, e, 7, "online", fmt.Sprintf("v%d", i), "")
	}
	all, _ := replay(t, e, "", 1000, 305) // waits until every entry settled
	assertMergedOrder(t, "t", all)
	cursor := ""
	for _, want := range []int{100, 100, 100, 5} {
		page, next, err := e.Edges(context.Background(), cursor, 100)
		require.NoError(t, err)
		require.Len(t, page, want, "a page from a shard with more than its share")
		assert.Equal(t, all[:want], page)
		all, cursor = all[want:], next
	}
}

// Trimming what the reader has read leaves its cursor good; trimming what
// it has not makes the cursor a CursorError, not lost, whose Oldest reads on.
func TestEdgesTrimmed(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	e := logEngine(t, c, 2)
	var ids []string
	for i := range 40 {
		ids = append(ids, appendEdge(t, e, 0, "online", fmt.Sprintf("u%d", i), ""))
	}
	all, _ := replay(t, e, "", 40, 40)
	require.Len(t, all, 40)
	first, cursor, err := e.Edges(context.Background(), "", 20)
	require.NoError(t, err)
	require.Len(t, first, 20)
	ctx := context.Background()
	entry := func(i int) string { return ids[i][strings.LastIndex(ids[i], "_")+1:] }

	require.NoError(t, c.XTrimMinID(ctx, e.keys[0].logKey(), entry(10)).Err())
	rest, _, err := e.Edges(ctx, cursor, 40)
	require.NoError(t, err, "entries trimmed up to the cursor")
	assert.Equal(t, all[20:], rest)

	require.NoError(t, c.XTrimMinID(ctx, e.keys[0].logKey(), entry(20)).Err())
	rest, _, err = e.Edges(ctx, cursor, 40)
	require.NoError(t, err, "the entries up to and with the cursor's trimmed")
	assert.Equal(t, all[20:], rest)

	require.NoError(t, c.XTrimMinID(ctx, e.keys[0].logKey(), entry(30)).Err())
	_, _, err = e.Edges(ctx, cursor, 40)
	var gone *presence.CursorError
	require.ErrorAs(t, err, &gone)
	assert.True(t, errors.Is(err, presence.ErrCursorGone))
	assert.False(t, gone.Lost, "trimmed, not lost")
	assert.Equal(t, cursor, gone.Cursor)
	rest, _, err = e.Edges(ctx, gone.Oldest, 40)
	require.NoError(t, err, "Oldest answers")
	assert.Equal(t, all[30:], rest)

	// Every entry trimmed: a cursor at the end stays good.
	_, end, err := e.Edges(ctx, gone.Oldest, 40)
	require.NoError(t, err)
	require.NoError(t, c.XTrimMaxLen(ctx, e.keys[0].logKey(), 0).Err())
	page, next, err := e.Edges(ctx, end, 40)
	require.NoError(t, err)
	assert.Empty(t, page)
	assert.Equal(t, end, next)
	n, oldest, err := e.LogStats(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.True(t, oldest.IsZero())
}

// A Redis that lost its data (FLUSHALL, or a restart without persistence)
// and cursors that are not the log's own: each is a CursorError, lost, and
// its Oldest reads the log as it is now.
func TestEdgesLost(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	e := logEngine(t, c, 4)
	ctx := context.Background()
	// A cursor made before the log had an edge names its epochs too.
	_, empty, err := e.Edges(ctx, "", 10)
	require.NoError(t, err)
	for i := range 12 {
		appendEdge(t, e, i%4, "online", fmt.Sprintf("u%d", i), "")
	}
	_, cursor := replay(t, e, empty, 5, 12)
	_, _, err = e.Edges(ctx, empty, 10)
	require.NoError(t, err, "the cursor of the empty log")

	lost := func(what, cursor string) *presence.CursorError {
		t.Helper()
		_, _, err := e.Edges(ctx, cursor, 10)
		var gone *presence.CursorError
		require.ErrorAs(t, err, &gone, what)
		assert.True(t, errors.Is(err, presence.ErrCursorGone), what)
		assert.True(t, gone.Lost, "%s: lost", what)
		assert.Equal(t, cursor, gone.Cursor, what)
		_, _, err = e.Edges(ctx, gone.Oldest, 10)
		require.NoError(t, err, "%s: Oldest answers", what)
		return gone
	}
	lost("garbage", "not-a-cursor")
	lost("a cursor of another number of shards", logCursor{pos: make([]logPos, 3)}.encode())
	lost("a position the log never had", func() string {
		cur, err := decodeCursor(cursor, 4)
		require.NoError(t, err)
		cur.pos[1].n += 1000
		return cur.encode()
	}())

	require.NoError(t, c.FlushAll(ctx).Err())
	lost("after FLUSHALL", cursor)
	lost("the empty log's cursor after FLUSHALL", empty)
	_, after, err := e.Edges(ctx, "", 10)
	require.NoError(t, err)
	srv.restart()
	// The node finds the loss, which begins another epoch of the log, and
	// puts back what it held: only then is a snapshot exact.
	eventually(t, "the node put back what Redis lost", func(c *assert.CollectT) {
		_, _, _, err := e.UsersAt(ctx, 0)
		assert.NoError(c, err)
	})
	gone := lost("after a restart empty", after)
	appendEdge(t, e, 2, "online", "back", "")
	got, _ := replay(t, e, gone.Oldest, 10, 1)
	assert.Equal(t, "back", got[0].UID, "Oldest reads the log's new life")
}

// UsersAt and MembersAt: the cursor is at each shard's last entry as the
// listing was read, so the edges after it are those appended after.
func TestListingCursor(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	e := logEngine(t, c, 4)
	ctx := context.Background()
	count, users, cursor, err := e.UsersAt(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, count)
	assert.Empty(t, users)
	page, _, err := e.Edges(ctx, cursor, 10)
	require.NoError(t, err, "the empty listing's cursor")
	assert.Empty(t, page)

	for i := range 8 {
		uid := fmt.Sprintf("u%d", i)
		require.NoError(t, c.ZAdd(ctx, e.keys[e.shard(uid)].online, redis.Z{Member: uid}).Err())
		appendEdge(t, e, e.shard(uid), "online", uid, "")
		require.NoError(t, c.ZAdd(ctx, e.keys[e.shard("room")].members, redis.Z{Member: "room " + uid}).Err())
		appendEdge(t, e, e.shard("room"), "join", uid, "room")
	}
	count, users, cursor, err = e.UsersAt(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, 8, count)
	assert.Equal(t, []string{"u0", "u1", "u2"}, users)
	mcount, members, mcursor, err := e.MembersAt(ctx, "room", "u5", 10)
	require.NoError(t, err)
	assert.Equal(t, 8, mcount)
	assert.Equal(t, []string{"u6", "u7"}, members)
	n, oldest, err := e.LogStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 16, n)
	assert.WithinDuration(t, time.Now(), oldest, time.Minute)

	later := []string{
		appendEdge(t, e, e.shard("u0"), "offline", "u0", ""),
		appendEdge(t, e, e.shard("room"), "leave", "u1", "room"),
	}
	for _, cur := range []string{cursor, mcursor} {
		got, _ := replay(t, e, cur, 10, 2)
		require.Len(t, got, 2)
		assert.ElementsMatch(t, later, []string{got[0].ID, got[1].ID})
	}
}

func TestLogPositionCheck(t *testing.T) {
	at := func(ms, n, num uint64) logPos { return logPos{logID{ms, n}, num} }
	// A log that added 10 entries, 100-1 .. 100-10, and keeps the last 6.
	kept := shardLog{last: logID{100, 10}, added: 10, length: 6, first: logID{100, 5}, hasFirst: true}
	cases := []struct {
		name  string
		log   shardLog
		there bool
		pos   logPos
		want  int
	}{
		{"at a kept entry", kept, true, at(100, 7, 7), posOK},
		{"at the last", kept, true, at(100, 10, 10), posOK},
		{"at the first kept", kept, true, at(100, 5, 5), posOK},
		{"a kept entry missing", kept, false, at(100, 7, 7), posLost},
		{"a kept entry with a number among the trimmed", kept, true, at(100, 7, 3), posLost},
		{"at the last trimmed", kept, false, at(100, 4, 4), posOK},
		{"at the start, all before trimmed", kept, false, at(0, 0, 4), posOK},
		{"behind the trimmed", kept, false, at(100, 3, 3), posTrimmed},
		{"at the start, trimmed since", kept, false, at(0, 0, 2), posTrimmed},
		{"before the first with too high a number", kept, false, at(100, 4, 5), posLost},
		{"past the last", kept, false, at(100, 11, 10), posLost},
		{"a number past those added", kept, true, at(100, 10, 11), posLost},
		{"behind a deleted one", shardLog{last: logID{100, 10}, added: 10, length: 9, first: logID{100, 1}, hasFirst: true, maxDel: logID{100, 6}}, true, at(100, 5, 5), posTrimmed},
		{"an empty log at its end", shardLog{last: logID{100, 10}, added: 10}, false, at(100, 10, 10), posOK},
		{"an empty log behind its end", shardLog{last: logID{100, 10}, added: 10}, false, at(100, 9, 9), posTrimmed},
		{"no log, at the start", shardLog{}, false, at(0, 0, 0), posOK},
		{"no log, a position", shardLog{}, false, at(100, 1, 1), posLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.log
			l.there = tc.there
			assert.Equal(t, tc.want, l.check(tc.pos))
		})
	}
}

// On a Redis Cluster, the shards' logs on three masters: one pipeline of
// scripts reads them all, and the listing's cursor is exact there too.
func TestEdgesOnRedisCluster(t *testing.T) {
	rc := startRedisCluster(t)
	e := logEngine(t, rc.client(t), 16)
	var ids []string
	for i := range 64 {
		ids = append(ids, appendEdge(t, e, i%16, "online", fmt.Sprintf("u%d", i), ""))
	}
	all, cursor := replay(t, e, "", 10, 64)
	assertMergedOrder(t, "t", all)
	var got []string
	for _, ed := range all {
		got = append(got, ed.ID)
	}
	assert.ElementsMatch(t, ids, got)
	_, _, at, err := e.UsersAt(context.Background(), 10)
	require.NoError(t, err)
	assert.Equal(t, cursor, at, "the listing's cursor is at the log's end")
	later := appendEdge(t, e, 5, "offline", "u5", "")
	page, _ := replay(t, e, at, 10, 1)
	assert.Equal(t, later, page[0].ID)
}
