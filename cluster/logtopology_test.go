package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// A reader replays the log while users churn and the owner of a shard's
// slot changes (a failover, a migration): it reads every edge once, the
// same edges in the same order as a replay of the whole log made after,
// and those rebuild the final state.

func TestLogReplayAcrossClusterFailover(t *testing.T) {
	testLogTopology(t, "CLUSTER FAILOVER", func(rc *redisCluster, slot int64) {
		_, replica := rc.owners(slot)
		require.NoError(t, rc.plain(replica).ClusterFailover(context.Background()).Err())
		rc.waitOwner(slot, replica)
	})
}

func TestLogReplayAcrossSlotMigration(t *testing.T) {
	testLogTopology(t, "slot migration", func(rc *redisCluster, slot int64) {
		master, _ := rc.owners(slot)
		var to *redisServer
		for _, s := range rc.nodes {
			if s != master && rc.role(s) == "master" {
				to = s
				break
			}
		}
		require.NotNil(t, to, "another master")
		rc.migrate(slot, master, to)
		rc.waitOwner(slot, to)
	})
}

// logReader replays the log from the start in small pages, on its own
// goroutine, retrying Redis's errors, until told to stop at a cursor.
type logReader struct {
	e     *Engine
	mu    sync.Mutex
	edges []presence.Edge
	err   error // a CursorError: the replay cannot go on
	fails int   // reads Redis failed, retried
	end   chan logCursor
	done  chan struct{}
}

func startLogReader(t *testing.T, e *Engine) *logReader {
	r := &logReader{e: e, end: make(chan logCursor, 1), done: make(chan struct{})}
	go r.run(t)
	t.Cleanup(func() {
		select {
		case r.end <- logCursor{}:
		default:
		}
		<-r.done
	})
	return r
}

func (r *logReader) run(t *testing.T) {
	defer close(r.done)
	cursor := ""
	var end *logCursor
	deadline := time.Time{}
	for {
		select {
		case c := <-r.end:
			if c.pos == nil {
				return
			}
			end, deadline = &c, time.Now().Add(2*testWait)
		default:
		}
		if end != nil && (reachedNoFail(r.e, cursor, *end) || time.Now().After(deadline)) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		page, next, err := r.e.Edges(ctx, cursor, 7)
		cancel()
		var gone *presence.CursorError
		if errors.As(err, &gone) {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			return
		}
		if err != nil {
			r.mu.Lock()
			r.fails++
			r.mu.Unlock()
		}
		if err != nil || len(page) == 0 {
			time.Sleep(20 * time.Millisecond) // Redis is failing over, or the next entries settle
			continue
		}
		r.mu.Lock()
		r.edges = append(r.edges, page...)
		r.mu.Unlock()
		cursor = next
	}
}

// reachedNoFail is reached for a goroutine of the test's.
func reachedNoFail(e *Engine, cursor string, end logCursor) bool {
	cur, err := decodeCursor(cursor, len(e.keys))
	if err != nil {
		return false
	}
	for i, p := range cur.pos {
		if p.less(end.pos[i]) {
			return false
		}
	}
	return true
}

// upTo is edges less those past end.
func upTo(t *testing.T, e *Engine, edges []presence.Edge, end logCursor) []presence.Edge {
	var out []presence.Edge
	for _, ed := range edges {
		k := edgeKey(t, e.cfg.Prefix, ed.ID)
		if !end.pos[k.shard].less(logPos{logID: logID{k.ms, k.seq}}) {
			out = append(out, ed)
		}
	}
	return out
}

func (r *logReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.edges)
}

func testLogTopology(t *testing.T, what string, fault func(rc *redisCluster, slot int64)) {
	rc := startRedisClusterReplicas(t, 1)
	rc.waitReplicas()
	a := startNode(t, testConfig(rc.client(t), "a"))
	slot, err := rc.client(t).ClusterKeySlot(context.Background(), a.keys[0].logKey()).Result()
	require.NoError(t, err)
	reader := startLogReader(t, a.Engine)
	ch := &churner{n: a, uids: uidsOf("c", 40), on: map[string]bool{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { ch.run(stop, uint64(time.Now().UnixNano())) })
	waitCount := func(n int, why string) {
		require.Eventually(t, func() bool { return reader.count() >= n }, 3*testWait, 20*time.Millisecond, why)
	}
	waitCount(50, "the reader reads the churn")
	began := time.Now()
	fault(rc, slot)
	took := time.Since(began)
	waitCount(reader.count()+100, "the reader reads on after the "+what)
	close(stop)
	wg.Wait()

	truth := newLogState()
	ch.mu.Lock()
	for uid, on := range ch.on {
		truth.online[uid] = on
		truth.member("room")[uid] = on
	}
	ch.mu.Unlock()
	ctx := context.Background()
	eventually(t, "every change landed", func(c *assert.CollectT) {
		_, users, err := a.Users(ctx, 1000)
		assert.NoError(c, err)
		assert.Equal(c, truth.users(), users)
	})
	end := logEnd(t, a.Engine)
	reader.end <- end
	<-reader.done
	require.NoError(t, reader.err, "the replay across the %s", what)
	read := upTo(t, a.Engine, reader.edges, end)
	whole := upTo(t, a.Engine, replayUntil(t, a.Engine, "", 1000, end), end)
	require.Len(t, read, len(whole), "edges read across the %s", what)
	for i := range whole {
		require.Equal(t, whole[i].ID, read[i].ID, "edge %d read across the %s", i, what)
	}
	state := newWholeLogState() // the order across shards holds through the failover and the migration
	for _, e := range read {
		require.NoError(t, state.apply(e))
	}
	assert.Equal(t, truth.users(), state.users())
	assert.Equal(t, trueKeys(truth.member("room")), trueKeys(state.member("room")))
	t.Logf("%s of slot %d done in %v: %d edges read across it, %d reads failed and retried", what, slot, took.Round(time.Millisecond), len(read), reader.fails)
}
