package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// Records returns the records of those of uids that have one, in one round
// trip per shard. Called by presence.Node; an embedder does not call it.
func (e *Engine) Records(ctx context.Context, uids []string) (map[string]protocol.Record, error) {
	perShard := make(map[int][]string)
	for _, uid := range uids {
		s := e.shard(uid)
		perShard[s] = append(perShard[s], uid)
	}
	var runs []scriptRun
	var lists [][]string
	for s, list := range perShard {
		k := e.keys[s]
		runs = append(runs, scriptRun{recordsScript, k.keys, append([]any{k.tag, e.cfg.LastSeenTTL.Milliseconds()}, toAny(list)...)})
		lists = append(lists, list)
	}
	out := make(map[string]protocol.Record)
	for i, cmd := range runScripts(ctx, e.rdb, runs) {
		vals, err := scriptResult(cmd, len(lists[i]))
		if err != nil {
			e.health.fail("records", err)
			return nil, fmt.Errorf("cluster: read records: %w", err)
		}
		for j, uid := range lists[i] {
			raw, _ := vals[j].(string)
			if raw == "" {
				continue
			}
			var rec protocol.Record
			if err := json.Unmarshal([]byte(raw), &rec); err != nil {
				return nil, fmt.Errorf("cluster: the record of %q: %w", uid, err)
			}
			out[uid] = rec
		}
	}
	e.health.ok()
	return out, nil
}

// Hidden lists, in order, the invisible users online (channel "") or the
// invisible members of channel. Each shard keeps its invisible users in a
// set of their own (T:hid), so this costs one script call per shard and, for
// a channel, one membership check per invisible user online: O(invisible
// users), however many are online or in the channel. One set per shard
// rather than one for the cluster keeps every key under its shard's hash
// tag, so the script that turns a user invisible touches one slot. Called by
// presence.Node; an embedder does not call it.
func (e *Engine) Hidden(ctx context.Context, channel string) ([]string, error) {
	runs := make([]scriptRun, len(e.keys))
	for s, k := range e.keys {
		runs[s] = scriptRun{hiddenScript, k.keys, []any{k.tag}}
	}
	var hidden []string
	for _, cmd := range runScripts(ctx, e.rdb, runs) {
		vals, err := scriptResult(cmd, 0)
		if err != nil {
			e.health.fail("hidden", err)
			return nil, fmt.Errorf("cluster: list invisible users: %w", err)
		}
		hidden = append(hidden, stringList(vals)...)
	}
	if channel != "" && len(hidden) > 0 {
		key := e.keys[e.shard(channel)].members
		pipe := e.rdb.Pipeline()
		for _, uid := range hidden {
			pipe.ZScore(ctx, key, channel+" "+uid)
		}
		cmds, _ := pipe.Exec(ctx) // errors are read per command
		in := hidden[:0]
		for i, cmd := range cmds {
			switch err := cmd.Err(); {
			case err == nil:
				in = append(in, hidden[i])
			case !errors.Is(err, redis.Nil):
				e.health.fail("hidden", err)
				return nil, fmt.Errorf("cluster: list invisible members of %q: %w", channel, err)
			}
		}
		hidden = in
	}
	e.health.ok()
	if len(hidden) == 0 {
		return nil, nil
	}
	slices.Sort(hidden)
	return hidden, nil
}

// The kinds of recordOp, as recordScript names them.
const (
	opInfo   = "i"
	opSet    = "s"
	opExpire = "x"
	opPut    = "p" // put back a record Redis lost
)

// recordOp is one change of a user's record for recordScript.
type recordOp struct {
	kind  string
	uid   string
	info  json.RawMessage
	set   protocol.Set
	until int64
	put   *knownRecord // opPut
	after int64        // the writer's counted when it was handed over
}

func (o recordOp) args() []any {
	switch o.kind {
	case opInfo:
		return []any{opInfo, o.uid, string(o.info)}
	case opSet:
		note := ""
		if o.set.Note != nil {
			b, _ := json.Marshal(o.set.Note) // a Note always marshals
			note = string(b)
		}
		return []any{opSet, o.uid, o.set.Mode, b2i(o.set.NoteSet), note}
	case opExpire:
		return []any{opExpire, o.uid, o.until}
	}
	r := o.put.rec
	note := ""
	if r.Note != nil {
		b, _ := json.Marshal(r.Note)
		note = string(b)
	}
	return []any{opPut, o.uid, string(r.Info), r.Mode, note, o.put.hid}
}

// hides reports whether o is a set to invisible.
func (o recordOp) hides() bool { return o.kind == opSet && o.set.Mode == protocol.ModeInvisible }

// addRecordOp queues a record change behind the changes handed over before
// it; false once halted.
func (w *writer) addRecordOp(op recordOp) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	op.after = w.counted
	w.pending.cut(w.counted) // the counts made from now on go after it
	w.recOps = append(w.recOps, op)
	if op.hides() {
		w.hiding[op.uid]++
	}
	w.countPendingLocked()
	w.mu.Unlock()
	w.poke()
	return true
}

// queueRepublish asks the writer to copy uid's record, changed, to the
// channels this node holds a membership of uid in. Called under the
// router's lock, as the change arrives.
func (w *writer) queueRepublish(uid string, kr *knownRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.localUsers[uid].n == 0 {
		return
	}
	w.repub = append(w.repub, republish{uid: uid, kr: *kr})
	w.poke()
}

// republish is a changed record to copy to the channels of its user.
type republish struct {
	uid string
	kr  knownRecord
}

// flushRecords writes the queued record changes whose counts (those
// queued before them) are written, in order, then copies the records that
// changed to the channels this node holds of their users.
func (w *writer) flushRecords(ctx context.Context) error {
	w.mu.Lock()
	// Only those whose counts are written: the others wait for them.
	n := 0
	for n < len(w.recOps) && w.recOps[n].after <= w.taken {
		n++
	}
	ops := w.recOps[:n:n]
	w.recOps = w.recOps[n:]
	w.recInflight = len(ops)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.recInflight = 0
		w.countPendingLocked()
		w.mu.Unlock()
	}()
	if len(ops) > 0 {
		if err := w.writeRecords(ctx, ops); err != nil {
			return err // writeRecords queued again those that failed
		}
	}
	return w.copyRecords(ctx)
}

// writeRecords runs recordScript for ops, in pipelined calls per shard (a
// user's changes stay in order: they are in one shard), and hands the edges
// of the sets and expiries that changed a record to the Relay as EventProduced.
func (w *writer) writeRecords(ctx context.Context, ops []recordOp) error {
	ctx, cancel := context.WithTimeout(ctx, w.opTimeout())
	defer cancel()
	perShard := make(map[int][]recordOp)
	for _, op := range ops {
		s := w.shard(op.uid)
		perShard[s] = append(perShard[s], op)
	}
	var calls []scriptRun
	var batches [][]recordOp
	now := time.Now().UnixMilli()
	for s, list := range perShard {
		k := w.keys[s]
		for len(list) > 0 {
			n := min(len(list), w.cfg.Batch)
			args := []any{k.tag, w.cfg.LastSeenTTL.Milliseconds(), now}
			for _, op := range list[:n] {
				args = append(args, op.args()...)
			}
			calls = append(calls, scriptRun{recordScript, k.keys, args})
			batches = append(batches, list[:n])
			list = list[n:]
		}
	}
	cmds := w.runEdgeScripts(ctx, calls)
	var edges []presence.Edge
	var failed error
	for i, cmd := range cmds {
		vals, err := scriptResult(cmd, 0)
		if err != nil {
			// A call that failed ran whole or not at all; running it again
			// applies a set again, which the last-set-wins rule allows, and
			// an expiry again, which finds nothing.
			failed = err
			continue
		}
		for j := 0; j+recordValues <= len(vals); j += recordValues {
			n, _ := vals[j].(int64)
			raw, _ := vals[j+1].(string)
			hid, _ := vals[j+2].(int64)
			v, _ := vals[j+3].(int64)
			ms, _ := vals[j+4].(int64)
			id, _ := vals[j+5].(string)
			op := batches[i][n-1]
			// The router knows it before this node writes anything after
			// it, a membership that copies the record included.
			w.learned(op.uid, v, hid, ms, raw)
			if op.kind != opSet && op.kind != opExpire {
				continue // only a client's set and a note's expiry are edges
			}
			var rec protocol.Record
			if err := json.Unmarshal([]byte(raw), &rec); err != nil {
				w.log.Warn("cluster: a record script returned a bad record", "uid", op.uid, "err", err)
				continue
			}
			e := presence.Edge{Kind: presence.EdgeUpdate, UID: op.uid, Record: rec, At: time.UnixMilli(ms)}
			if id != "" {
				e.ID = w.edgeID(e, id)
			}
			edges = append(edges, e)
		}
	}
	w.mu.Lock()
	for i, cmd := range cmds {
		if cmd.Err() != nil {
			continue
		}
		for _, op := range batches[i] {
			if op.hides() {
				if w.hiding[op.uid]--; w.hiding[op.uid] <= 0 {
					delete(w.hiding, op.uid)
				}
			}
		}
	}
	w.mu.Unlock()
	if failed != nil {
		w.health.fail("records", failed)
		// The calls that succeeded are not run again: keep those that
		// failed only.
		var again []recordOp
		for i, cmd := range cmds {
			if cmd.Err() != nil {
				again = append(again, batches[i]...)
			}
		}
		w.mu.Lock()
		if !w.closed {
			w.recOps = append(again, w.recOps...)
		}
		w.mu.Unlock()
	} else {
		w.health.ok()
	}
	r := w.relay()
	for _, e := range edges {
		w.m.edges.WithLabelValues(e.Kind.String()).Inc()
		r.Receive(presence.Event{Kind: presence.EventProduced, Edge: e})
	}
	return failed
}

// recordValues is how many values recordScript returns per change that
// changed a record: its place, the record, hidden-at, version, ms, log
// entry ID.
const recordValues = 6

// copyRecords copies the records queued by queueRepublish to the channels
// this node holds of their users, one script call per channel shard and
// record.
func (w *writer) copyRecords(ctx context.Context) error {
	w.mu.Lock()
	reps := w.repub
	w.repub = nil
	type target struct {
		rep      republish
		shard    int
		channels []string
	}
	var targets []target
	for _, rep := range reps {
		perShard := make(map[int][]string)
		for channel, members := range w.localMembers {
			if _, ok := members[rep.uid]; ok {
				s := w.shard(channel)
				perShard[s] = append(perShard[s], channel)
			}
		}
		for s, chs := range perShard {
			targets = append(targets, target{rep, s, chs})
		}
	}
	w.mu.Unlock()
	if len(targets) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.opTimeout())
	defer cancel()
	calls := make([]scriptRun, len(targets))
	for i, tg := range targets {
		k := w.keys[tg.shard]
		args := []any{k.tag, tg.rep.uid, tg.rep.kr.v, tg.rep.kr.hid, tg.rep.kr.at, tg.rep.kr.raw}
		calls[i] = scriptRun{memberRecordScript, k.keys, append(args, toAny(tg.channels)...)}
	}
	var failed []republish
	var firstErr error
	for i, cmd := range runScripts(ctx, w.rdb, calls) {
		if err := cmd.Err(); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if !slices.ContainsFunc(failed, func(r republish) bool { return r.uid == targets[i].rep.uid && r.kr.v == targets[i].rep.kr.v }) {
				failed = append(failed, targets[i].rep)
			}
		}
	}
	if firstErr != nil {
		// Copying again is safe: a copy as new as the one in Redis is no
		// change.
		w.mu.Lock()
		if !w.closed {
			w.repub = append(failed, w.repub...)
		}
		w.mu.Unlock()
		w.health.fail("records", firstErr)
		return firstErr
	}
	return nil
}

// putBackRecords queues, for the users this node holds in shards, the
// records it knows, to be put back where Redis lost them: a record Redis
// still has, or that a set made since, wins.
func (w *writer) putBackRecords(shards map[int]bool) {
	var ops []recordOp
	for uid := range w.heldUsers {
		if !shards[w.shard(uid)] {
			continue
		}
		if kr, ok := w.recordOf(uid); ok && !kr.rec.IsZero() {
			ops = append(ops, recordOp{kind: opPut, uid: uid, put: &kr})
		}
	}
	if len(ops) == 0 {
		return
	}
	w.mu.Lock()
	if !w.closed {
		w.recOps = append(ops, w.recOps...)
	}
	w.mu.Unlock()
}

// recordArgs is r's arguments for setScript: a membership that this node
// holds carries its user's record as this node knows it, so that the
// channel's shard has a copy for its snapshots and its join edge.
func (w *writer) recordArgs(r record) []any {
	if r.channel == "" || r.n == 0 {
		return r.args()
	}
	kr, ok := w.recordOf(r.uid)
	if !ok {
		return r.args()
	}
	return []any{"M", r.channel, r.uid, r.n, r.away, kr.v, kr.hid, kr.raw}
}
