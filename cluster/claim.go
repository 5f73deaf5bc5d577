package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
)

// claim marks the nodes that stopped renewing as dead and reaps their
// records, shard by shard, until none is left.
func (w *writer) claim(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.opTimeout())
	defer cancel()
	shards := make([]int, len(w.keys))
	for i := range shards {
		shards[i] = i
	}
	// A live node's liveness has at least Timeout-RenewEvery left; a gap of
	// half that cannot have expired one.
	gap := (w.cfg.Timeout - w.cfg.RenewEvery) / 2
	pause := w.cfg.RenewEvery + w.retry
	back := map[int]bool{}
	for len(shards) > 0 && ctx.Err() == nil {
		calls := make([]scriptCall, len(shards))
		for i, s := range shards {
			calls[i] = scriptCall{shard: s, args: []any{w.keys[s].tag, w.cfg.Node, w.cfg.Timeout.Milliseconds(),
				w.cfg.Batch, gap.Milliseconds(), pause.Milliseconds()}}
		}
		var more []int
		for i, cmd := range w.runScripts(ctx, claimScript, calls) {
			res, err := scriptResult(cmd, 3)
			if err != nil {
				w.health.fail("claim", err)
				return err
			}
			if flag(res[0]) {
				back[shards[i]] = true
			}
			if edges := res[3:]; len(edges) > 0 {
				w.m.reaped.Add(float64(len(edges) / 2))
				w.log.Info("cluster: reaped records of dead nodes", "shard", shards[i], "edges", len(edges)/2)
				w.produced(edges)
			}
			if flag(res[2]) {
				more = append(more, shards[i])
			}
		}
		shards = more
	}
	w.health.ok()
	if len(back) > 0 {
		return w.reassert(ctx, back)
	}
	return ctx.Err()
}

// leave reaps this node's own records in every shard, once the loop has
// stopped.
func (w *writer) leave(ctx context.Context) error {
	shards := make([]int, len(w.keys))
	for i := range shards {
		shards[i] = i
	}
	for len(shards) > 0 {
		calls := make([]scriptCall, len(shards))
		for i, s := range shards {
			calls[i] = scriptCall{shard: s, args: []any{w.keys[s].tag, w.cfg.Node, w.cfg.Batch}}
		}
		var more []int
		for i, cmd := range w.runScripts(ctx, leaveScript, calls) {
			res, err := scriptResult(cmd, 1)
			if err != nil {
				return fmt.Errorf("cluster: drop records of %s on close: %w", w.cfg.Node, err)
			}
			w.produced(res[1:])
			if flag(res[0]) {
				more = append(more, shards[i])
			}
		}
		shards = more
	}
	return nil
}

// produced hands the user edges a script made to the Relay's Produced. Each
// edge is made once, by one script call, so it reaches one node's Produced.
func (w *writer) produced(vals []any) {
	r := w.relay()
	for i := 0; i+1 < len(vals); i += 2 {
		uid, _ := vals[i].(string)
		on := flag(vals[i+1])
		kind := presence.EdgeOffline
		if on {
			kind = presence.EdgeOnline
		}
		w.m.edges.WithLabelValues(kind.String()).Inc()
		r.Produced(presence.Edge{Kind: kind, UID: uid, At: time.Now()})
	}
}

// A scriptCall is one script run on one shard's keys.
type scriptCall struct {
	shard int
	args  []any
	recs  []record // setScript's records, to requeue or hold
}

// runScripts runs s once per call, on the shard's keys, through runScripts.
func (w *writer) runScripts(ctx context.Context, s *redis.Script, calls []scriptCall) []*redis.Cmd {
	runs := make([]scriptRun, len(calls))
	for i, c := range calls {
		runs[i] = scriptRun{s, w.keys[c.shard].alive, c.args}
	}
	return runScripts(ctx, w.rdb, runs)
}
