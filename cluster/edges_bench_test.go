package cluster

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// commandCounter counts the calls of log.lua a client sends, and the round
// trips that carry them (a pipeline is one); the engine's own renewals on
// the same client are not counted.
type commandCounter struct {
	calls, trips atomic.Int64
}

func isLogRead(cmd redis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 1 && (args[1] == logScript.Hash() || args[1] == logScript.src)
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isLogRead(cmd) {
			c.calls.Add(1)
			c.trips.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if isLogRead(cmd) {
				n++
			}
		}
		if n > 0 {
			c.calls.Add(int64(n))
			c.trips.Add(1)
		}
		return next(ctx, cmds)
	}
}

// fillLog appends n entries to the shards' logs, spread over them, each ms
// holding a few across shards, all older than the settle frontier.
func fillLog(tb testing.TB, e *Engine, n int) {
	tb.Helper()
	ctx := context.Background()
	base := uint64(time.Now().Add(-time.Hour).UnixMilli())
	pipe := e.rdb.Pipeline()
	shards := len(e.keys)
	for i, k := range e.keys {
		pipe.HSetNX(ctx, k.tag+":clock", "epoch", strconv.Itoa(i))
	}
	for i := range n {
		shard := (i * 7919) % shards // not in turn, so the merge has work
		k := e.keys[shard]
		ms := base + uint64(i/5)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: k.logKey(), ID: strconv.FormatUint(ms, 10) + "-" + strconv.Itoa(i%5),
			Values: []any{"k", "join", "u", "user" + strconv.Itoa(i), "c", "channel" + strconv.Itoa(shard), "t", strconv.FormatUint(ms, 10)}})
		if pipe.Len() >= 5000 {
			_, err := pipe.Exec(ctx)
			require.NoError(tb, err)
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(tb, err)
}

// BenchmarkEdgesReplay reads a log of 100,000 edges in 16 shards back
// through Edges in pages of 1000, and reports edges per second, the
// script calls and round trips per page, and Redis's time per call.
func BenchmarkEdgesReplay(b *testing.B) {
	const total = 100_000
	srv := startRedis(b)
	c := srv.client(b)
	e := logEngine(b, c, 16)
	fillLog(b, e, total)
	counter := &commandCounter{}
	c.AddHook(counter)
	ctx := context.Background()
	pages, read := 0, 0
	began := time.Now()
	for b.Loop() {
		cursor := ""
		for n := 0; n < total; {
			page, next, err := e.Edges(ctx, cursor, 1000)
			if err != nil {
				b.Fatal(err)
			}
			if len(page) == 0 {
				b.Fatalf("no edges after %d of %d", n, total)
			}
			if !strings.HasPrefix(page[0].ID, "evt_t_") {
				b.Fatalf("edge ID %q", page[0].ID)
			}
			n += len(page)
			cursor = next
			pages++
		}
		read += total
	}
	took := time.Since(began)
	b.ReportMetric(float64(read)/took.Seconds(), "edges/s")
	b.ReportMetric(float64(counter.calls.Load())/float64(pages), "calls/page")
	b.ReportMetric(float64(counter.trips.Load())/float64(pages), "trips/page")
	b.ReportMetric(float64(read)/float64(pages), "edges/page")
	if stats, err := c.Info(ctx, "commandstats").Result(); err == nil {
		for line := range strings.Lines(stats) {
			if strings.HasPrefix(line, "cmdstat_evalsha:") {
				b.Log(strings.TrimSpace(line)) // with the engine's renewals, a few
			}
		}
	}
}
