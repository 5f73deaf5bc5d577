package cluster

import (
	"context"
	"maps"
	"slices"
	"time"
)

// What Redis holds of this node, and putting it back: after Redis lost it
// (restoreLost, quietly), after Redis took the node for dead (reassert,
// with edges), and holding changes back meanwhile. Owned by the loop, but
// for requeueHeld, which takes w.mu.

// heldIn returns the records Redis holds of this node in shards, as far as
// this node knows.
func (w *writer) heldIn(shards map[int]bool) []record {
	var recs []record
	for uid, c := range w.heldUsers {
		if shards[w.shard(uid)] {
			recs = append(recs, record{uid: uid, n: c.n, away: c.away})
		}
	}
	for k, away := range w.heldMembers {
		if shards[w.shard(k.channel)] {
			recs = append(recs, record{uid: k.uid, channel: k.channel, n: 1, away: b2i(away)})
		}
	}
	return recs
}

// restoreLost writes again, through the restore mode, what had landed in the
// shards where Redis lost this node's writes.
func (w *writer) restoreLost(ctx context.Context) error {
	if len(w.restore) == 0 {
		return nil
	}
	shards := w.restore
	w.restore = make(map[int]bool)
	recs := w.heldIn(shards)
	w.m.rewritten.Add(float64(len(recs)))
	w.log.Warn("cluster: redis lost this node's records; restoring them", "shards", len(shards), "records", len(recs))
	// Users first, then memberships, as a reassert does: a user that went
	// offline since the loss gets its online again before its joins.
	users, members := splitKinds(recs)
	if _, err := w.write(ctx, users, modeRestore); err != nil {
		maps.Copy(w.restore, shards) // the memberships wait for their users: all again
		return err
	}
	_, err := w.write(ctx, members, modeRestore)
	if err == nil {
		w.putBackRecords(shards)
	}
	return err
}

// splitKinds splits recs into user records and memberships.
func splitKinds(recs []record) (users, members []record) {
	for _, r := range recs {
		if r.channel == "" {
			users = append(users, r)
		} else {
			members = append(members, r)
		}
	}
	return users, members
}

// reassert writes everything this node holds in shards again, making its
// edges: Redis reaped it while this node was cut off or stalled, and made
// the offline and leave edges then.
func (w *writer) reassert(ctx context.Context, shards map[int]bool) error {
	// A claim ends this node's life in every shard, and a call that hears so
	// from one shard may have reached only some: a renewal asks the others,
	// so that one reassert covers all that ended. Else a membership written
	// again in one shard could come before its user's online, owed in a
	// shard not heard from yet.
	var probes []scriptCall
	for s := range w.keys {
		if !shards[s] {
			probes = append(probes, w.setCall(s, nil, modeWrite))
		}
	}
	if len(probes) > 0 {
		_, more, err := w.runSetCalls(ctx, probes, modeWrite)
		if err != nil {
			return err // the next renewal hears it again
		}
		shards = maps.Clone(shards)
		maps.Copy(shards, more)
	}
	recs := w.heldIn(shards)
	w.m.rewritten.Add(float64(len(recs)))
	if len(recs) > 0 {
		w.log.Warn("cluster: writing this node's records again", "shards", len(shards), "records", len(recs))
	}
	// The users' records begin the new life, then the memberships follow
	// in it, once the users' online edges are made (see waves). Redis
	// holds none of the memberships meanwhile: a restore must not put them
	// back quietly, as their leaves were made.
	users, members := splitKinds(recs)
	for _, r := range members {
		delete(w.heldMembers, membership{r.channel, r.uid})
	}
	// Every shard gets a call, one without records too: it begins the
	// node's next life there (see standing in the scripts).
	var calls []scriptCall
	for s := range shards {
		if cs := w.batches(s, users, modeReassert); len(cs) > 0 {
			calls = append(calls, cs...)
		} else {
			calls = append(calls, w.setCall(s, nil, modeReassert))
		}
	}
	failed, err := w.runSet(ctx, calls, modeReassert)
	if err != nil {
		w.requeueHeld(append(failed, members...))
		return err
	}
	// The memberships of a user whose record did not land go as changes
	// after it (see requeueHeld). A shard whose new life did not begin
	// fences the others (its life ended again): they fail, and go again
	// with the next reassert.
	notLanded := map[string]bool{}
	for _, r := range failed {
		notLanded[r.uid] = true
	}
	later := slices.DeleteFunc(slices.Clone(members), func(r record) bool { return !notLanded[r.uid] })
	members = slices.DeleteFunc(members, func(r record) bool { return notLanded[r.uid] })
	more, err := w.write(ctx, members, modeWrite)
	w.requeueHeld(slices.Concat(failed, later, more))
	return err
}

// The modes of setScript calls: changes, held records written again with
// their edges, and held records restored after Redis lost them.
const (
	modeWrite = iota
	modeReassert
	modeRestore
)

// restoreWindow is how long, after Redis lost records, every live node has
// to restore its own before any change is written: one renewal round, and
// a retry, as nodes renew at once when Redis answers again.
func (w *writer) restoreWindow() time.Duration { return w.cfg.RenewEvery + 2*w.retry }

// holdFor writes no change that can make an edge for d from now, or until
// a later end already set.
func (w *writer) holdFor(d time.Duration) {
	if until := time.Now().Add(d); until.After(w.holdUntil) {
		w.holdUntil = until
	}
}

// hold records that Redis now holds r for this node.
func (w *writer) hold(r record) {
	switch {
	case r.channel == "" && r.n > 0:
		w.heldUsers[r.uid] = userCount{r.n, r.away}
	case r.channel == "":
		delete(w.heldUsers, r.uid)
	case r.n > 0:
		w.heldMembers[membership{r.channel, r.uid}] = r.away == 1
	default:
		delete(w.heldMembers, membership{r.channel, r.uid})
	}
}

// requeueHeld puts in pending what this node holds now of the keys of
// held records that could not be written again, unless a newer change is
// there: that one says what to write. Not the held records themselves: a
// change of the key may be on its way already (taken by the write whose
// reply said this node was taken for dead), and a held record queued
// after it would undo it, for good: a tab closed during a stall written
// back online.
func (w *writer) requeueHeld(recs []record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	var now []record
	seen := map[recordKey]bool{}
	for _, r := range recs {
		if k := r.key(); !seen[k] && !w.pending.has(k) {
			seen[k] = true
			now = append(now, w.localRecord(k))
		}
	}
	// One round: a user's records of both kinds are written in the order
	// its edges need (see waves).
	w.pending.addRound(now)
}

// localRecord is what this node holds now of k. Called with w.mu held.
func (w *writer) localRecord(k recordKey) record {
	if k.channel == "" {
		c := w.localUsers[k.uid]
		return record{uid: k.uid, n: c.n, away: c.away}
	}
	away, ok := w.localMembers[k.channel][k.uid]
	return record{uid: k.uid, channel: k.channel, n: b2i(ok), away: b2i(ok && away)}
}

// heard notes that a call to shard sent at sent was answered, and whether
// this node had gone longer than its lease without an answer there before
// it: another node may have reaped it meanwhile.
func (w *writer) heard(shard int, sent time.Time) {
	last := w.answered[shard]
	w.lapsed[shard] = !last.IsZero() && sent.Sub(last) > w.cfg.Timeout
	w.answered[shard] = sent
}

// lost notes that Redis lost this node's writes in shard: they are put back
// (restoreLost), and nothing that can make an edge is written until the
// restore window, left, has passed. If this node's lease had lapsed there,
// a claimer may have reaped it before the loss and says so with its next
// claim (see remark in the scripts), which drops what this node put back so
// that it writes it again with edges: the hold lasts two claim rounds more,
// so that no change of its users is written before that.
func (w *writer) lost(shard int, left time.Duration) {
	w.restore[shard] = true
	if w.lapsed[shard] {
		left += 2 * w.cfg.ClaimEvery
	}
	w.holdFor(left)
}
