package cluster

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/presence"
)

// writer keeps what this node holds and writes it to Redis. Engine.Apply
// only records a change and wakes the writer's goroutine (loop),
// which is the only one to write this node's records, so the changes for a
// user (or membership) reach Redis in the order they were made. The loop
// also renews the node's liveness, writes its records again where Redis lost
// them, and claims the records of dead nodes.
type writer struct {
	*base

	// mu guards the changes not yet in Redis and what this node holds now.
	mu       lockorder.Mutex[lockorder.Writer]
	pending  changes
	inflight int // changes taken by a write under way
	// What this node holds now, written or not: a live node's own users
	// are online, and members of the channels they joined, whatever Redis
	// says before its writes land.
	localUsers   map[string]userCount
	localMembers map[string]map[string]bool // channel -> uid -> away
	closed       bool
	wake         chan struct{}
	// Records: the changes not yet in Redis, in order, those taken by a
	// write under way, and the changed records to copy to the channels
	// this node holds of their users.
	recOps      []recordOp
	recInflight int
	repub       []republish
	// counted numbers the count changes (users, memberships) handed over, taken
	// the last of them a flush wrote: a record change waits for the counts
	// handed over before it (recordOp.after) to be written.
	counted, taken int64
	// recordOf returns a user's record as the router knows it, and learned
	// tells the router of a record this node wrote; set by New.
	recordOf func(uid string) (knownRecord, bool)
	learned  func(uid string, v, hid, at int64, raw string)
	// hiding counts, per user, the sets to invisible not written yet: until
	// they are, the router does not know the user is invisible, and a join
	// of the user is not shown before Redis has it (see Engine.Apply).
	hiding map[string]int

	// Owned by loop: what Redis holds for this node, i.e. the state whose
	// edges were produced.
	heldUsers   map[string]userCount
	heldMembers map[membership]bool // -> away
	// Owned by loop, to find and repair a Redis that lost this node's
	// writes (see check in the scripts): the number of the newest write
	// per shard that landed, the last number given, the shards whose held
	// records must be restored, and until when nothing that can make an
	// edge is written, as a restore window is open.
	landed []int64
	writes int64
	// landedNow is landed for the listings (see landedIn), which run
	// outside the loop.
	landedNow []atomic.Int64
	// life is, per shard, the life this node's records there belong to (see
	// standing in the scripts): the last one begun there and confirmed by a
	// reply. ended is the newest life Redis said had ended there: the next
	// one begins above both.
	life      []int64
	ended     []int64
	restore   map[int]bool
	holdUntil time.Time
	// unknown holds, per shard, the calls whose replies were lost: the
	// next call there asks for their edges (see recall in the scripts).
	unknown []lostCalls
	// answered is when the last answered call to each shard was sent, and
	// lapsed whether the one before it was longer ago than the lease (see
	// heard); reaped is what this node's claims reaped (see reaps).
	answered []time.Time
	lapsed   []bool
	reaped   reaps
	claimed  []presence.Edge // a claim's edges not handed on yet: see handClaimed

	stop context.CancelFunc
	done chan struct{} // closed when loop returns
}

type membership struct{ channel, uid string }

// userCount is a user's connections on this node, and how many are away.
type userCount struct{ n, away int }

func newWriter(b *base) *writer {
	return &writer{
		base:         b,
		localUsers:   make(map[string]userCount),
		localMembers: make(map[string]map[string]bool),
		hiding:       make(map[string]int),
		wake:         make(chan struct{}, 1),
		heldUsers:    make(map[string]userCount),
		heldMembers:  make(map[membership]bool),
		landed:       make([]int64, len(b.keys)),
		landedNow:    make([]atomic.Int64, len(b.keys)),
		life:         ones(len(b.keys)),
		ended:        make([]int64, len(b.keys)),
		unknown:      make([]lostCalls, len(b.keys)),
		answered:     make([]time.Time, len(b.keys)),
		lapsed:       make([]bool, len(b.keys)),
		reaped:       make(reaps, len(b.keys)),
		restore:      make(map[int]bool),
		done:         make(chan struct{}),
	}
}

// start starts the loop.
func (w *writer) start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	go w.loop(ctx)
}

// halt ignores changes from now on and stops the loop, leaving in Redis
// what it wrote, as if the process died.
func (w *writer) halt() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.stop()
	<-w.done
}

// setUser records that this node holds n connections of uid, away of which
// are away; false once halted.
func (w *writer) setUser(uid string, n, away int) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	c := userCount{max(n, 0), min(max(away, 0), max(n, 0))}
	w.pending.add(record{uid: uid, n: c.n, away: c.away})
	w.counted++
	if n > 0 {
		w.localUsers[uid] = c
	} else {
		delete(w.localUsers, uid)
	}
	w.countPendingLocked()
	w.mu.Unlock()
	w.poke()
	return true
}

// setMember records whether this node holds uid's membership of channel,
// and whether it says the member is away; false once halted, or while a set
// of uid's to invisible is not written yet (see hiding): then the change is
// recorded, but not to be shown before Redis has it.
func (w *writer) setMember(channel, uid string, on, away bool) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	show := w.hiding[uid] == 0
	away = away && on
	w.pending.add(record{uid: uid, channel: channel, n: b2i(on), away: b2i(away)})
	w.counted++
	if on {
		if w.localMembers[channel] == nil {
			w.localMembers[channel] = make(map[string]bool)
		}
		w.localMembers[channel][uid] = away
	} else if m := w.localMembers[channel]; m != nil {
		delete(m, uid)
		if len(m) == 0 {
			delete(w.localMembers, channel)
		}
	}
	w.countPendingLocked()
	w.mu.Unlock()
	w.poke()
	return show
}

func (w *writer) countPendingLocked() {
	w.m.pending.Set(float64(w.pending.n + w.inflight + len(w.recOps) + w.recInflight))
}

// poke wakes the loop.
func (w *writer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// holds reports whether this node holds uid, or uid's membership of channel.
func (w *writer) holds(channel, uid string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if channel == "" {
		return w.localUsers[uid].n > 0
	}
	_, ok := w.localMembers[channel][uid]
	return ok
}

// holdsActive reports whether this node holds an active connection of uid,
// or, in channel, holds uid's membership and says it is not away: then uid
// is active there, whatever Redis says before this node's writes land.
func (w *writer) holdsActive(channel, uid string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if channel == "" {
		c := w.localUsers[uid]
		return c.n > c.away
	}
	away, ok := w.localMembers[channel][uid]
	return ok && !away
}

// addMembers adds to members those of channel this node holds, and drops
// from away those this node holds active.
func (w *writer) addMembers(channel string, members, away []string) ([]string, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for uid, isAway := range w.localMembers[channel] {
		if !slices.Contains(members, uid) {
			members = append(members, uid)
		}
		if !isAway {
			away = slices.DeleteFunc(away, func(a string) bool { return a == uid })
		}
	}
	return members, away
}

func (w *writer) loop(ctx context.Context) {
	defer close(w.done)
	renew := time.NewTicker(w.cfg.RenewEvery)
	defer renew.Stop()
	claim := time.NewTicker(w.cfg.ClaimEvery)
	defer claim.Stop()
	var (
		retry <-chan time.Time
		held  <-chan time.Time // the restore window ends: write what waited
		seen  = w.health.recovered()
	)
	for {
		if held == nil && !w.holdUntil.IsZero() {
			held = time.After(time.Until(w.holdUntil))
		}
		var err error
		select {
		case <-ctx.Done():
			return
		case <-held:
			held = nil
			err = w.flush(ctx)
		case <-w.wake:
			if retry != nil {
				continue // Redis failed a moment ago: the retry flushes too
			}
			err = w.flush(ctx)
		case <-renew.C:
			err = w.renew(ctx)
		case <-retry:
			retry = nil
			err = w.renew(ctx)
		case <-claim.C:
			// Right after an outage every node may look dead: renew first
			// (below). The claim script itself pauses claims after a gap,
			// for every node, until all have had a renewal round. A node
			// without a Relay yet does not claim: the edges it reaps must
			// reach the Relay as produced.
			if w.attached() && !w.health.isDown() && w.health.recovered() == seen {
				err = w.claim(ctx)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if retry == nil {
				retry = time.After(w.retry)
			}
			continue
		}
		if r := w.health.recovered(); r != seen {
			// Redis is back: prove we live at once, before anyone can take
			// us for dead.
			seen = r
			if err := w.renew(ctx); err != nil && retry == nil {
				retry = time.After(w.retry)
			}
		}
	}
}

// A record is one change for setScript: a user's connection count on this
// node, or one of its memberships.
type record struct {
	uid, channel string // channel empty: a user record
	n            int    // connections, or 1|0 for a membership
	away         int    // away connections, or 1|0 for a membership
}

func (r record) args() []any {
	if r.channel == "" {
		return []any{"u", r.uid, r.n, r.away}
	}
	return []any{"m", r.channel, r.uid, r.n, r.away}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (w *writer) recordShard(r record) int {
	if r.channel == "" {
		return w.shard(r.uid)
	}
	return w.shard(r.channel)
}

// flush restores what Redis lost, then writes the pending changes, round
// after round (see changes), unless a restore window is open.
func (w *writer) flush(ctx context.Context) error {
	if err := w.restoreLost(ctx); err != nil {
		return err
	}
	if !w.holdUntil.IsZero() {
		if time.Now().Before(w.holdUntil) {
			return nil
		}
		w.holdUntil = time.Time{}
	}
	// Record changes whose counts are written already go before the
	// counts pending: they were made before them.
	if err := w.flushRecords(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	segs := w.pending.take(w.counted)
	for _, seg := range segs {
		for _, rs := range seg.rounds {
			w.inflight += len(rs)
		}
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.inflight = 0
		w.countPendingLocked()
		w.mu.Unlock()
	}()
	// A user's changes reach Redis in the order they were made: each
	// segment's counts, then the record changes made after them and before
	// the next segment's (a user who turns invisible, then joins, joins
	// invisible).
	for i, seg := range segs {
		for j, recs := range seg.rounds {
			failed, err := w.writeRound(ctx, recs)
			if err != nil || len(failed) > 0 {
				// Failed, or held back by a restore window: what follows
				// waits behind it.
				rest := append([]segment{{append([][]record{failed}, seg.rounds[j+1:]...), seg.counted}}, segs[i+1:]...)
				w.putBack(rest)
				if err == nil {
					err = w.restoreLost(ctx)
				}
				return err
			}
		}
		w.mu.Lock()
		w.taken = max(w.taken, seg.counted)
		w.mu.Unlock()
		if err := w.flushRecords(ctx); err != nil {
			w.putBack(segs[i+1:])
			return err
		}
	}
	return nil
}

// putBack puts segments that were taken and not written back in pending,
// before the changes made since, unless halted.
func (w *writer) putBack(segs []segment) {
	if len(segs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.pending.putBack(segs)
	}
}

// renew flushes, then renews this node's liveness in every shard; a shard
// that had taken it for dead (or that Redis lost) gets its records again.
func (w *writer) renew(ctx context.Context) error {
	if err := w.flush(ctx); err != nil {
		return err
	}
	start := time.Now()
	calls := make([]scriptCall, len(w.keys))
	for s := range w.keys {
		calls[s] = w.setCall(s, nil, modeWrite)
	}
	if _, err := w.runSet(ctx, calls, modeWrite); err != nil {
		return err
	}
	w.m.renew.Observe(time.Since(start).Seconds())
	return w.restoreLost(ctx)
}

func (w *writer) setCall(shard int, recs []record, mode int) scriptCall {
	w.writes++
	m := "w"
	switch mode {
	case modeReassert:
		m = "a"
	case modeRestore:
		m = "r"
	}
	life := w.life[shard]
	if mode == modeReassert {
		life = max(life, w.ended[shard]) + 1
	}
	args := []any{w.keys[shard].tag, w.cfg.Node, w.cfg.Timeout.Milliseconds(), w.cfg.LastSeenTTL.Milliseconds(),
		w.landed[shard], w.writes, w.restoreWindow().Milliseconds(), m, life}
	var tail []any
	for _, r := range recs {
		tail = append(tail, w.recordArgs(r)...)
	}
	return scriptCall{shard: shard, args: args, tail: tail, recs: recs, write: w.writes, life: life,
		renewal: mode == modeWrite && len(recs) == 0}
}

// batches splits shard's records among recs into setScript calls.
func (w *writer) batches(shard int, recs []record, mode int) []scriptCall {
	var rs []record
	for _, r := range recs {
		if w.recordShard(r) == shard {
			rs = append(rs, r)
		}
	}
	var calls []scriptCall
	for len(rs) > 0 {
		n := min(len(rs), w.cfg.Batch)
		calls = append(calls, w.setCall(shard, rs[:n], mode))
		rs = rs[n:]
	}
	return calls
}

// writeRound writes one round of changes in its waves, the second once the
// first landed whole, and returns the records not written.
func (w *writer) writeRound(ctx context.Context, recs []record) ([]record, error) {
	first, second := waves(recs)
	failed, err := w.write(ctx, first, modeWrite)
	if err != nil || len(failed) > 0 {
		return append(failed, second...), err
	}
	return w.write(ctx, second, modeWrite)
}

// write runs setScript for recs in pipelined batches per shard, and
// returns the records of the calls that failed or were held back.
func (w *writer) write(ctx context.Context, recs []record, mode int) ([]record, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	perShard := make([][]record, len(w.keys))
	for _, r := range recs {
		s := w.recordShard(r)
		perShard[s] = append(perShard[s], r)
	}
	var calls []scriptCall
	for s, rs := range perShard {
		for len(rs) > 0 {
			n := min(len(rs), w.cfg.Batch)
			calls = append(calls, w.setCall(s, rs[:n], mode))
			rs = rs[n:]
		}
	}
	return w.runSet(ctx, calls, mode)
}

// runSet runs setScript calls and returns the records of those that failed
// or that a restore window held back; records that landed update what this
// node holds. Shards that had taken this node for dead get its records
// again; those that lost its writes are marked for restoring.
func (w *writer) runSet(ctx context.Context, calls []scriptCall, mode int) ([]record, error) {
	failed, back, err := w.runSetCalls(ctx, calls, mode)
	if err == nil && len(back) > 0 {
		err = w.reassert(ctx, back)
	}
	return failed, err
}

// runSetCalls is runSet but for the reassert: it returns the shards that
// had taken this node for dead.
func (w *writer) runSetCalls(ctx context.Context, calls []scriptCall, mode int) (failed []record, back map[int]bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, w.opTimeout())
	defer cancel()
	var firstErr error
	back = map[int]bool{}
	var made []any // the edges, handed on once every call is read: see produced
	for i, cmd := range w.runScripts(ctx, setScript, calls) {
		c := calls[i]
		res, err := scriptResult(cmd, setHead)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if mode == modeRestore {
				w.restore[c.shard] = true
			} else {
				failed = append(failed, c.recs...)
			}
			continue
		}
		w.land(c.shard, c.write)
		made = append(made, res[setHead:]...) // a call not applied may bring back lost replies' edges
		state, _ := res[1].(int64)
		left, _ := res[2].(int64)
		held, _ := res[3].(int64)
		switch state {
		case setOwed:
			// Fenced: this node's life there ended, and the call changed
			// nothing. Its records go again, with their edges, in the next
			// life (reassert); a reassert that meets a newer end waits
			// for the next renewal to find it, rather than chase it.
			w.ended[c.shard] = max(w.ended[c.shard], held)
			if mode != modeRestore {
				failed = append(failed, c.recs...)
			}
			if mode != modeReassert {
				back[c.shard] = true
			}
			continue
		case setStale:
			if mode == modeRestore {
				w.restore[c.shard] = true
			} else {
				failed = append(failed, c.recs...)
			}
			continue
		case setHeldBack, setLost:
			if mode != modeRestore {
				failed = append(failed, c.recs...)
			}
			if state == setLost {
				w.lost(c.shard, time.Duration(left)*time.Millisecond)
			} else {
				w.holdFor(time.Duration(left) * time.Millisecond)
			}
			continue
		}
		// A reply names the life Redis holds: the one this call began, or
		// one a reassert whose reply was lost began.
		w.life[c.shard] = max(w.life[c.shard], c.life, held)
		for _, r := range c.recs {
			w.hold(r)
		}
	}
	w.produced(made)
	w.m.usersHeld.Set(float64(len(w.heldUsers)))
	w.health.wrote(firstErr)
	if firstErr != nil {
		w.reloadMap() // a shard's master may be gone: the retry should find its successor
		w.health.fail("write", firstErr)
		return failed, nil, firstErr
	}
	w.health.ok()
	return failed, back, nil
}

// The states setScript reports of a call besides applied: held back by an
// open restore window, refused as Redis lost this node's writes, not
// applied as a later call of this node ran before it (its first try timed
// out and Redis ran it late), or fenced as this node's life there ended.
const (
	setHeldBack = 1
	setLost     = 2
	setStale    = 4
	setOwed     = 5
)

// setHead is how many values setScript returns before its edges.
const setHead = 4

// land notes that write, a call to shard, landed.
func (w *writer) land(shard int, write int64) {
	w.landed[shard] = max(w.landed[shard], write)
	w.landedNow[shard].Store(w.landed[shard])
}

// landedIn is the number of the newest write to shard that landed, for a
// listing to tell whether Redis still holds it (see listing.lua).
func (w *writer) landedIn(shard int) int64 { return w.landedNow[shard].Load() }

func ones(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
