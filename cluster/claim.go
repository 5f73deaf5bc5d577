package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
)

// reapBudget bounds the records one claim or leave call reaps. A Lua script
// holds Redis for its whole run, so every node's renewals and writes wait
// behind it: a dead node's thousands of records go in many short calls
// rather than a few long ones. Each call is atomic whatever its size, so
// the budget changes nothing of exactly-once, only how long one call runs.
const reapBudget = 100

// claim marks the nodes that stopped renewing as dead and reaps their
// records, shard by shard, until none is left.
func (w *writer) claim(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.opTimeout())
	defer cancel()
	// A live node's liveness has at least Timeout-RenewEvery left; a gap of
	// half that cannot have expired one.
	gap := (w.cfg.Timeout - w.cfg.RenewEvery) / 2
	pause := w.cfg.RenewEvery + w.retry
	back := map[int]bool{}
	dead := make(deadNodes, len(w.keys))
	paused := false
	for _, phase := range reapPhases {
		if phase == "a" {
			// Users only of the nodes whose memberships phase m reaped
			// in every shard (see claim.lua).
			phase += " " + strings.Join(dead.all(), ",")
		}
		for shards := w.allShards(); len(shards) > 0 && ctx.Err() == nil; {
			var p bool
			var err error
			if shards, p, err = w.claimRound(ctx, phase, shards, gap, pause, back, dead); err != nil {
				w.handClaimed(false)
				return err
			}
			paused = paused || p
		}
		if paused {
			// A shard that paused may still hold memberships of a dead
			// node, or edges it left to hand on: its users wait for a
			// round in which every shard went through the first phase.
			break
		}
	}
	w.handClaimed(!paused && ctx.Err() == nil)
	w.health.ok()
	if err := w.restoreLost(ctx); err != nil {
		return err
	}
	if len(back) > 0 {
		return w.reassert(ctx, back)
	}
	return ctx.Err()
}

// claimRound runs one claim call in each of shards, in phase, and returns
// the shards with more to reap (or to tell of a node dead elsewhere), and
// whether a shard paused claims; shards that had taken this node for dead
// are added to back.
func (w *writer) claimRound(ctx context.Context, phase string, shards []int, gap, pause time.Duration, back map[int]bool, dead deadNodes) ([]int, bool, error) {
	calls := make([]scriptCall, len(shards))
	for i, s := range shards {
		w.writes++
		calls[i] = scriptCall{shard: s, write: w.writes, args: []any{w.keys[s].tag, w.cfg.Node, w.cfg.Timeout.Milliseconds(),
			min(w.cfg.Batch, reapBudget), gap.Milliseconds(), pause.Milliseconds(), w.cfg.LastSeenTTL.Milliseconds(),
			w.landed[s], w.writes, w.restoreWindow().Milliseconds(), phase, w.life[s]}, tail: append([]any{dead.tell(s)}, w.reaped.args(s)...)}
	}
	var more []int
	var made []any
	var firstErr error
	anyPaused := false
	start := time.Now()
	cmds := w.runScripts(ctx, claimScript, calls)
	tScripts := time.Since(start)
	for i, cmd := range cmds {
		res, err := scriptResult(cmd, claimHead)
		if err != nil {
			// The others' edges are handed on all the same; this call's,
			// if it ran, come back with the next call in its shard.
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		w.land(shards[i], calls[i].write)
		now, _ := res[3].(int64)
		reaped, _ := res[4].(string)
		forgot, _ := res[5].(string)
		found, _ := res[6].(string)
		w.reaped.update(shards[i], now, reaped, forgot)
		dead.found(shards[i], found)
		p, _ := res[1].(int64)
		anyPaused = anyPaused || p != 0
		if p == 2 {
			w.lost(shards[i], w.restoreWindow())
		}
		held, _ := res[7].(int64)
		if flag(res[0]) {
			w.ended[shards[i]] = max(w.ended[shards[i]], held)
			back[shards[i]] = true
		} else {
			w.life[shards[i]] = max(w.life[shards[i]], held)
		}
		if edges := res[claimHead:]; len(edges) > 0 {
			w.log.Info("cluster: reaped records of dead nodes", "shard", shards[i], "edges", len(edges)/edgeValues)
			made = append(made, edges...)
		}
		if flag(res[2]) {
			more = append(more, shards[i])
		}
	}
	more = dead.untold(more)
	w.claimed = append(w.claimed, w.edges(made)...)
	w.log.Debug("cluster: claim round", "phase", phase, "shards", len(calls), "edges", len(made)/edgeValues, "scripts", tScripts)
	if firstErr != nil {
		w.health.fail("claim", firstErr)
		return nil, anyPaused, firstErr
	}
	return more, anyPaused, nil
}

// leave reaps this node's own records in every shard, once the loop has
// stopped.
func (w *writer) leave(ctx context.Context) error {
	w.handClaimed(true)
	for _, phase := range reapPhases {
		for shards := w.allShards(); len(shards) > 0; {
			var err error
			if shards, err = w.leaveRound(ctx, phase, shards); err != nil {
				return err
			}
		}
	}
	return nil
}

// leaveRound runs one leave call in each of shards, in phase, and returns
// the shards with more to drop.
func (w *writer) leaveRound(ctx context.Context, phase string, shards []int) ([]int, error) {
	calls := make([]scriptCall, len(shards))
	for i, s := range shards {
		w.writes++
		calls[i] = scriptCall{shard: s, write: w.writes, args: []any{w.keys[s].tag, w.cfg.Node, min(w.cfg.Batch, reapBudget),
			w.cfg.LastSeenTTL.Milliseconds(), phase, w.writes}}
	}
	var more []int
	var made []any
	var firstErr error
	for i, cmd := range w.runScripts(ctx, leaveScript, calls) {
		res, err := scriptResult(cmd, 1)
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		made = append(made, res[1:]...)
		if flag(res[0]) {
			more = append(more, shards[i])
		}
	}
	w.produced(made)
	if firstErr != nil {
		return nil, fmt.Errorf("cluster: drop records of %s on close: %w", w.cfg.Node, firstErr)
	}
	return more, nil
}

// reapPhases are the phases of a claim or a leave: memberships in every
// shard first, then users, so that a user's leaves come before its offline.
var reapPhases = []string{"m", "a"}

func (w *writer) allShards() []int {
	shards := make([]int, len(w.keys))
	for i := range shards {
		shards[i] = i
	}
	return shards
}

// edgeKinds reads the kinds of edges the scripts name.
var edgeKinds = map[string]presence.EdgeKind{}

func init() {
	for k := presence.EdgeOnline; k <= presence.EdgeActive; k++ {
		edgeKinds[k.String()] = k
	}
}

// claimHead is how many values claimScript returns before its edges.
const claimHead = 8

// edgeValues is how many values a script returns per edge: kind, uid,
// channel, ms, log entry ID.
const edgeValues = 5

// produced hands the edges one round of script calls made to the Relay as
// EventProduced and returns how many were offline edges. Each edge is made
// once, by one script call, so it reaches one node's Relay (and, kept in the
// outbox, that of a node that claims this one before it was delivered). At
// is the Redis clock's, as every node's last-seen time is.
//
// A user's records and its memberships live in different shards, so one
// round's calls made a user's edges in shard order, not in the order they
// happened. What happened is known, though: a user is online before it
// joins and turns away, and leaves its channels before it goes offline. So
// the edges go in that order (online, away or active, join or leave,
// offline), each kind in the order the scripts made them.
func (w *writer) produced(vals []any) int {
	edges := w.edges(vals)
	slices.SortStableFunc(edges, byKind)
	return w.hand(edges)
}

// handClaimed hands on a claim's edges, in the order produced gives one
// round's. With the outbox, a claim that paused or failed in some shard
// (not complete) keeps them for the next claim, as they are safe in Redis
// meanwhile: the other shards may have handed on a dead node's kept join
// (see takeOver in the scripts) while its user's kept online waits in the
// paused shard.
func (w *writer) handClaimed(complete bool) {
	if len(w.claimed) == 0 || (!complete && w.cfg.Outbox) {
		return
	}
	edges := w.claimed
	w.claimed = nil
	slices.SortStableFunc(edges, byKind)
	w.m.reaped.Add(float64(w.hand(edges)))
}

// edges reads the edges a script returned: kind, uid, channel, ms, log
// entry ID per edge.
func (w *writer) edges(vals []any) []presence.Edge {
	var edges []presence.Edge
	for i := 0; i+edgeValues <= len(vals); i += edgeValues {
		name, _ := vals[i].(string)
		kind, ok := edgeKinds[name]
		if !ok {
			w.log.Warn("cluster: a script made an edge of an unknown kind", "kind", name)
			continue
		}
		uid, _ := vals[i+1].(string)
		channel, _ := vals[i+2].(string)
		ms, _ := vals[i+3].(int64)
		e := presence.Edge{Kind: kind, UID: uid, Channel: channel, At: time.UnixMilli(ms)}
		if id, _ := vals[i+4].(string); id != "" {
			e.ID = w.edgeID(e, id)
		}
		edges = append(edges, e)
	}
	return edges
}

// hand relays edges as produced, in their order, and returns how many were
// offline edges.
func (w *writer) hand(edges []presence.Edge) int {
	r := w.relay()
	offline := 0
	for _, e := range edges {
		if e.Kind == presence.EdgeOffline {
			offline++
		}
		w.m.edges.WithLabelValues(e.Kind.String()).Inc()
		r.Receive(presence.Event{Kind: presence.EventProduced, Edge: e})
	}
	return offline
}

func byKind(a, b presence.Edge) int { return edgeRank[a.Kind] - edgeRank[b.Kind] }

// edgeRank orders the kinds of one round's edges; see produced.
var edgeRank = map[presence.EdgeKind]int{presence.EdgeOnline: 0, presence.EdgeAway: 1, presence.EdgeActive: 1,
	presence.EdgeJoin: 2, presence.EdgeLeave: 2, presence.EdgeOffline: 3}

// A scriptCall is one script run on one shard's keys: its arguments are
// args, then from and unknown (see recall in the scripts), then tail, then
// the log's (see runEdgeScripts).
type scriptCall struct {
	shard int
	args  []any
	tail  []any
	recs  []record // setScript's records, to requeue or hold
	write int64    // the call's number, rising per shard: see standing and recall in the scripts
	life  int64    // the life a setScript call carries: see standing in the scripts
	// renewal is a setScript call of a plain write with no records: it
	// makes no edge, and running it twice does what running it once does.
	renewal bool
}

// runScripts runs s once per call, on the shard's keys, through runEdgeScripts.
// The first call in each shard asks for the edges of the calls whose
// replies were lost there; a call whose reply is lost now is added to
// them, unless it is a renewal. A shard whose list is full gets only that
// first call; the others fail unsent (see maxLostRuns). Only the loop
// calls it (and leave, once the loop is over).
func (w *writer) runScripts(ctx context.Context, s *luaScript, calls []scriptCall) []*redis.Cmd {
	from := map[int]int64{} // shard -> the lowest number whose reply this node may lack
	for _, c := range calls {
		if f, ok := from[c.shard]; !ok || c.write < f {
			from[c.shard] = c.write
		}
	}
	type ask struct{ call, n int }
	asks := map[int]ask{} // shard -> the call asking for the lost replies' edges, and how many runs it asks for
	cmds := make([]*redis.Cmd, len(calls))
	var runs []scriptRun
	var sentIdx []int
	for i, c := range calls {
		lost := w.unknown[c.shard].runs
		f := from[c.shard]
		if len(lost) > 0 {
			f = min(f, lost[0].lo)
		}
		list := ""
		if _, ok := asks[c.shard]; !ok && len(lost) > 0 {
			asks[c.shard] = ask{i, len(lost)}
			list = w.unknown[c.shard].arg()
		} else if len(lost) >= maxLostRuns && !c.renewal {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(errLostRuns)
			continue
		} else if c.renewal {
			f = -1 // nothing to keep of it (see recall)
		}
		args := append(append(slices.Clip(c.args), f, list), c.tail...)
		runs = append(runs, scriptRun{s, w.keys[c.shard].keys, args})
		sentIdx = append(sentIdx, i)
	}
	sent := time.Now()
	for j, cmd := range w.runEdgeScripts(ctx, runs) {
		cmds[sentIdx[j]] = cmd
	}
	for _, i := range sentIdx {
		if cmds[i].Err() == nil {
			w.heard(calls[i].shard, sent)
		}
	}
	for s, a := range asks {
		if cmds[a.call].Err() == nil {
			w.unknown[s].runs = slices.Clone(w.unknown[s].runs[a.n:])
		}
	}
	for _, i := range sentIdx {
		if c := calls[i]; !c.renewal {
			w.unknown[c.shard].note(c.write, cmds[i].Err() == nil)
		}
	}
	return cmds
}
