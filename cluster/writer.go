package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// writeLoop is the only writer of this node's records, so the changes for a
// user (or membership) reach Redis in the order SetUser and SetMember saw them.
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
			// Right after an outage every node may look dead: renew first
			// (below). The claim script itself pauses claims after a gap,
			// for every node, until all have had a renewal round.
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
			// Redis is back: prove we live at once, before anyone can take
			// us for dead.
			seen = r
			if err := e.renew(ctx); err != nil && retry == nil {
				retry = time.After(e.retry)
			}
		}
	}
}

// A record is one change for setScript: a user's connection count on this
// node, or one of its memberships.
type record struct {
	uid, channel string // channel empty: a user record
	n            int    // connections, or 1|0 for a membership
}

func (r record) args() []any {
	if r.channel == "" {
		return []any{"u", r.uid, r.n}
	}
	return []any{"m", r.channel, r.uid, r.n}
}

func (e *Engine) recordShard(r record) int {
	if r.channel == "" {
		return e.shard(r.uid)
	}
	return e.shard(r.channel)
}

// flush writes the pending changes.
func (e *Engine) flush(ctx context.Context) error {
	e.mu.Lock()
	users, members := e.pendingUsers, e.pendingMembers
	e.pendingUsers, e.pendingMembers = make(map[string]int), make(map[membership]bool)
	e.inflight = len(users) + len(members)
	e.mu.Unlock()
	var recs []record
	for uid, n := range users {
		recs = append(recs, record{uid: uid, n: n})
	}
	for k, on := range members {
		n := 0
		if on {
			n = 1
		}
		recs = append(recs, record{uid: k.uid, channel: k.channel, n: n})
	}
	err := e.write(ctx, recs, false)
	e.mu.Lock()
	e.inflight = 0
	e.m.pending.Set(float64(len(e.pendingUsers) + len(e.pendingMembers)))
	e.mu.Unlock()
	return err
}

// renew flushes, then renews this node's liveness in every shard; a shard
// that had taken it for dead (or that Redis lost) gets its records again.
func (e *Engine) renew(ctx context.Context) error {
	if err := e.flush(ctx); err != nil {
		return err
	}
	start := time.Now()
	calls := make([]scriptCall, len(e.keys))
	for s := range e.keys {
		calls[s] = e.setCall(s, nil)
	}
	if err := e.runSet(ctx, calls, false); err != nil {
		return err
	}
	e.m.renew.Observe(time.Since(start).Seconds())
	return nil
}

// reassert writes everything this node holds in shards again: Redis lost it,
// or reaped it while this node was cut off or stalled.
func (e *Engine) reassert(ctx context.Context, shards map[int]bool) error {
	var recs []record
	for uid, n := range e.heldUsers {
		if shards[e.shard(uid)] {
			recs = append(recs, record{uid: uid, n: n})
		}
	}
	for k := range e.heldMembers {
		if shards[e.shard(k.channel)] {
			recs = append(recs, record{uid: k.uid, channel: k.channel, n: 1})
		}
	}
	if len(recs) == 0 {
		return nil
	}
	e.m.rewritten.Add(float64(len(recs)))
	e.log.Warn("cluster: writing this node's records again", "shards", len(shards), "records", len(recs))
	return e.write(ctx, recs, true)
}

type scriptCall struct {
	shard int
	args  []any
	recs  []record
}

func (e *Engine) setCall(shard int, recs []record) scriptCall {
	args := []any{e.keys[shard].tag, e.cfg.Node, e.cfg.Timeout.Milliseconds()}
	for _, r := range recs {
		args = append(args, r.args()...)
	}
	return scriptCall{shard: shard, args: args, recs: recs}
}

// write runs setScript for recs in pipelined batches per shard.
func (e *Engine) write(ctx context.Context, recs []record, reasserting bool) error {
	if len(recs) == 0 {
		return nil
	}
	perShard := make([][]record, len(e.keys))
	for _, r := range recs {
		s := e.recordShard(r)
		perShard[s] = append(perShard[s], r)
	}
	var calls []scriptCall
	for s, rs := range perShard {
		for len(rs) > 0 {
			n := min(len(rs), e.cfg.Batch)
			calls = append(calls, e.setCall(s, rs[:n]))
			rs = rs[n:]
		}
	}
	return e.runSet(ctx, calls, reasserting)
}

// runSet runs setScript calls. Records of calls that fail go back to pending
// unless a newer change is there; records that landed update what this node
// holds. Shards that had taken this node for dead get its records again.
func (e *Engine) runSet(ctx context.Context, calls []scriptCall, reasserting bool) error {
	ctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	var firstErr error
	back := map[int]bool{}
	for i, cmd := range e.runScripts(ctx, setScript, calls) {
		c := calls[i]
		res, err := scriptResult(cmd, 1)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			e.requeue(c.recs)
			continue
		}
		if flag(res[0]) && !reasserting {
			back[c.shard] = true
		}
		e.produced(res[1:])
		for _, r := range c.recs {
			e.hold(r)
		}
	}
	e.m.usersHeld.Set(float64(len(e.heldUsers)))
	if firstErr != nil {
		e.fail("write", firstErr)
		return firstErr
	}
	e.ok()
	if len(back) > 0 {
		return e.reassert(ctx, back)
	}
	return nil
}

func (e *Engine) hold(r record) {
	switch {
	case r.channel == "" && r.n > 0:
		e.heldUsers[r.uid] = r.n
	case r.channel == "":
		delete(e.heldUsers, r.uid)
	case r.n > 0:
		e.heldMembers[membership{r.channel, r.uid}] = struct{}{}
	default:
		delete(e.heldMembers, membership{r.channel, r.uid})
	}
}

// requeue puts records that did not land back in pending, unless a newer
// change is already there.
func (e *Engine) requeue(recs []record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	for _, r := range recs {
		if r.channel == "" {
			if _, newer := e.pendingUsers[r.uid]; !newer {
				e.pendingUsers[r.uid] = r.n
			}
			continue
		}
		k := membership{r.channel, r.uid}
		if _, newer := e.pendingMembers[k]; !newer {
			e.pendingMembers[k] = r.n > 0
		}
	}
}

// claim marks the nodes that stopped renewing as dead and reaps their
// records, shard by shard, until none is left.
func (e *Engine) claim(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	shards := make([]int, len(e.keys))
	for i := range shards {
		shards[i] = i
	}
	// A live node's liveness has at least Timeout-RenewEvery left; a gap of
	// half that cannot have expired one.
	gap := (e.cfg.Timeout - e.cfg.RenewEvery) / 2
	pause := e.cfg.RenewEvery + e.retry
	back := map[int]bool{}
	for len(shards) > 0 && ctx.Err() == nil {
		calls := make([]scriptCall, len(shards))
		for i, s := range shards {
			calls[i] = scriptCall{shard: s, args: []any{e.keys[s].tag, e.cfg.Node, e.cfg.Timeout.Milliseconds(),
				e.cfg.Batch, gap.Milliseconds(), pause.Milliseconds()}}
		}
		var more []int
		for i, cmd := range e.runScripts(ctx, claimScript, calls) {
			res, err := scriptResult(cmd, 3)
			if err != nil {
				e.fail("claim", err)
				return err
			}
			if flag(res[0]) {
				back[shards[i]] = true
			}
			if edges := res[3:]; len(edges) > 0 {
				e.m.reaped.Add(float64(len(edges) / 2))
				e.log.Info("cluster: reaped records of dead nodes", "shard", shards[i], "edges", len(edges)/2)
				e.produced(edges)
			}
			if flag(res[2]) {
				more = append(more, shards[i])
			}
		}
		shards = more
	}
	e.ok()
	if len(back) > 0 {
		return e.reassert(ctx, back)
	}
	return ctx.Err()
}

// runScripts runs one script per call in a pipeline by its SHA, then runs the
// calls that met an empty script cache (Redis restarted) again with the source.
func (e *Engine) runScripts(ctx context.Context, s *redis.Script, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := e.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = s.EvalSha(ctx, pipe, []string{e.keys[c.shard].alive}, c.args...)
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
			cmds[i] = s.Eval(ctx, pipe, []string{e.keys[calls[i].shard].alive}, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
