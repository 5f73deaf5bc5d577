package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// writeLoop is the only writer of this node's leases, so changes for a user
// reach Redis in the order SetLocal saw them.
func (e *Engine) writeLoop(ctx context.Context) {
	defer close(e.writerDone)
	renew := time.NewTicker(e.cfg.RenewEvery)
	defer renew.Stop()
	claim := time.NewTicker(e.cfg.ClaimEvery)
	defer claim.Stop()
	var (
		retry <-chan time.Time
		seen  = e.recoveries.Load()
	)
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
			if retry != nil {
				continue // Redis failed a moment ago: the retry flushes too
			}
			err = e.flush(ctx)
		case <-renew.C:
			err = e.renew(ctx)
		case <-retry:
			retry = nil
			err = e.renew(ctx)
		case <-claim.C:
			// Right after an outage every lease may look expired: renew ours
			// first (below). The claim script itself pauses claims after a
			// gap, for every node, until all have had a renewal round.
			if !e.isDown() && e.recoveries.Load() == seen {
				err = e.claim(ctx)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if retry == nil {
				retry = time.After(e.retry)
			}
			continue
		}
		if r := e.recoveries.Load(); r != seen {
			// Redis is back: re-assert our leases at once, before anyone
			// can take them for expired.
			seen = r
			if err := e.renew(ctx); err != nil && retry == nil {
				retry = time.After(e.retry)
			}
		}
	}
}

// flush writes the pending local changes.
func (e *Engine) flush(ctx context.Context) error {
	e.mu.Lock()
	batch := e.pending
	e.pending = make(map[string]int)
	e.inflight = len(batch)
	e.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := e.apply(ctx, batch, false)
	e.mu.Lock()
	e.inflight = 0
	e.m.pending.Set(float64(len(e.pending)))
	e.mu.Unlock()
	return err
}

// renew flushes, then renews every lease this node holds; leases Redis lost
// are added again by the same script, with their online edges.
func (e *Engine) renew(ctx context.Context) error {
	if err := e.flush(ctx); err != nil {
		return err
	}
	start := time.Now()
	if err := e.apply(ctx, e.held, true); err != nil {
		return err
	}
	e.m.renew.Observe(time.Since(start).Seconds())
	return nil
}

type scriptCall struct {
	keys  []string
	args  []any
	uids  []string
	conns []int
}

// apply runs setScript for changes (uid -> connections, 0 drops the lease) in
// pipelined batches per shard. Calls that fail are put back in pending unless
// a newer change is already there; for a renewal nothing is put back, as the
// next renewal retries anyway.
func (e *Engine) apply(ctx context.Context, changes map[string]int, renewal bool) error {
	if len(changes) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	ttl := e.cfg.Timeout.Milliseconds()
	renewFlag := 0
	if renewal {
		renewFlag = 1
	}
	perShard := make([][]scriptCall, len(e.keys))
	for uid, n := range changes {
		s := e.shard(uid)
		calls := perShard[s]
		if len(calls) == 0 || len(calls[len(calls)-1].uids) == e.cfg.Batch {
			calls = append(calls, scriptCall{keys: e.keys[s].all, args: []any{e.cfg.Node, ttl, e.cfg.StreamMaxLen, renewFlag}})
		}
		c := &calls[len(calls)-1]
		c.args = append(c.args, uid, n)
		c.uids = append(c.uids, uid)
		c.conns = append(c.conns, n)
		perShard[s] = calls
	}
	var calls []scriptCall
	for _, cs := range perShard {
		calls = append(calls, cs...)
	}
	cmds := e.runScripts(ctx, setScript, calls)
	var firstErr error
	var added, on, off int64
	for i, cmd := range cmds {
		c := calls[i]
		res, err := scriptResult(cmd, 4)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if !renewal {
				e.mu.Lock()
				if !e.closed {
					for j, uid := range c.uids {
						if _, newer := e.pending[uid]; !newer {
							e.pending[uid] = c.conns[j]
						}
					}
				}
				e.mu.Unlock()
			}
			continue
		}
		added += res[0]
		on += res[2]
		off += res[3]
		if !renewal {
			for j, uid := range c.uids {
				if c.conns[j] > 0 {
					e.held[uid] = c.conns[j]
				} else {
					delete(e.held, uid)
				}
			}
		}
	}
	e.m.leases.Set(float64(len(e.held)))
	e.m.edges.WithLabelValues("online").Add(float64(on))
	e.m.edges.WithLabelValues("offline").Add(float64(off))
	if renewal && added > 0 {
		// Our leases were gone: Redis restarted empty or failed over to a
		// replica that missed writes. Other nodes' views may be stale too.
		e.m.reasserted.Add(float64(added))
		e.log.Warn("cluster: re-asserted leases that Redis had lost", "leases", added)
		select {
		case e.resync <- struct{}{}:
		default:
		}
	}
	if firstErr != nil {
		op := "flush"
		if renewal {
			op = "renew"
		}
		e.fail(op, firstErr)
		return firstErr
	}
	e.ok()
	return nil
}

// claim drops expired leases of other nodes, shard by shard, until none is left.
func (e *Engine) claim(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	shards := make([]int, len(e.keys))
	for i := range shards {
		shards[i] = i
	}
	limit := int64(e.cfg.Batch)
	// A healthy lease has at least Timeout-RenewEvery left; a gap of half that
	// cannot have expired one.
	gap := (e.cfg.Timeout - e.cfg.RenewEvery) / 2
	pause := e.cfg.RenewEvery + e.retry
	for len(shards) > 0 && ctx.Err() == nil {
		calls := make([]scriptCall, len(shards))
		for i, s := range shards {
			calls[i] = scriptCall{keys: e.keys[s].claim, args: []any{e.cfg.Node, e.cfg.StreamMaxLen, limit,
				gap.Milliseconds(), pause.Milliseconds()}}
		}
		cmds := e.runScripts(ctx, claimScript, calls)
		var more []int
		for i, cmd := range cmds {
			res, err := scriptResult(cmd, 3)
			if err != nil {
				e.fail("claim", err)
				return err
			}
			if res[0] > 0 {
				e.m.claimed.Add(float64(res[0]))
				e.m.edges.WithLabelValues("claimed").Add(float64(res[1]))
				e.log.Info("cluster: claimed expired leases", "shard", shards[i], "leases", res[0], "offline", res[1])
			}
			if res[0] == limit {
				more = append(more, shards[i])
			}
		}
		shards = more
	}
	e.ok()
	return ctx.Err()
}

// runScripts runs one script per call in a pipeline by its SHA, then runs the
// calls that met an empty script cache (Redis restarted) again with the source.
func (e *Engine) runScripts(ctx context.Context, s *redis.Script, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := e.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = s.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe = e.rdb.Pipeline()
		for _, i := range again {
			cmds[i] = s.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// opTimeout bounds one batch of Redis calls: generous, so a loaded machine
// does not look like an outage, yet short of a lease's lifetime.
func (e *Engine) opTimeout() time.Duration { return e.cfg.Timeout / 2 }
