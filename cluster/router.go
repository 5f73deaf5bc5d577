package cluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/queue"
	"github.com/presenced/presenced/presence"
)

// router delivers to the Relay the topics this node follows: it keeps one
// sharded Pub/Sub subscription per shard that has a followed topic, reads
// each topic's state when the following begins (and again after a lost
// subscription), and relays the edges and messages that arrive.
//
// Every Relay call is decided under mu, in the order the calls must be made,
// and queued on its shard's queue in out. It is made after mu is released by
// the goroutine that decided it, unless another one is making the shard's
// calls already: one goroutine at a time per shard, in queue order (see
// deliver). So a snapshot and the edges of the same topic reach the Relay in
// the order they were decided, the seq filtering stays exact, no lock is held
// while the Relay works, and a node's own edge, decided by Apply's caller,
// is in the Relay when Apply returns, without waiting behind a shard reader
// that is reading a snapshot from Redis.
type router struct {
	*base
	w *writer // what this node holds, for snapshots and filtering

	// Lock order: mu, then a subq's or out's own lock, a leaf: changes and
	// calls are pushed under mu and made after it.
	mu     lockorder.Mutex[lockorder.Router]
	topics map[string]*topicState // by Pub/Sub channel name
	run    *runState              // while Run runs
	subs   []*redis.PubSub        // by shard, while Run runs; nil until a topic needs one
	// subq holds each shard's subscription changes, decided under mu and
	// not yet made, while Run runs. One goroutine at a time makes them, in
	// order (see queueSubLocked), so a subscription never overtakes the
	// unsubscription decided before it, and nobody who decides one waits
	// on Redis: go-redis holds a Pub/Sub's lock while it reconnects, which
	// takes a dial and a handshake, each up to its timeout, while Redis
	// hangs.
	subq []queue.Queue[subOp]
	// losses counts, by shard, the subscriptions lost in a row, none of
	// them confirmed by Redis since: the pause before the next one grows.
	losses []int
	out    []queue.Queue[func(presence.Relay)] // by shard: Relay calls decided, not yet made
	// known is the newest record relayed of each user this node hears of,
	// with its version (see routerrecords.go).
	known map[string]*knownRecord

	running atomic.Bool
}

// topicState is one channel or user this node follows, or followed a moment
// ago. Edges carry the shard's edge counter: once a snapshot at seq is in the
// Relay, an edge at or below seq is already in it.
type topicState struct {
	t        presence.Topic
	shard    int
	followed bool
	idle     time.Time // when it was last unfollowed
	seq      int64
	live     bool // Redis confirmed the subscription: a snapshot now misses no edge
	loaded   bool // a snapshot was decided since the following began
	stale    bool // re-subscribed after a lost connection: edges pass unfiltered until the next snapshot
	waiters  []chan struct{}
}

// A subOp subscribes the shard's Pub/Sub to names, or with off set
// unsubscribes it; with lost set, it replaces that lost Pub/Sub with a new
// one subscribed to every topic of the shard (see remake).
type subOp struct {
	names []string
	off   bool
	lost  *redis.PubSub
}

func newRouter(b *base, w *writer) *router {
	return &router{base: b, w: w, topics: make(map[string]*topicState), out: make([]queue.Queue[func(presence.Relay)], len(b.keys)),
		known: make(map[string]*knownRecord)}
}

// post queues a Relay call for shard, after those decided before it.
// Called with r.mu held.
func (r *router) post(shard int, call func(presence.Relay)) {
	_, _ = r.out[shard].Push(call) // unbounded and never closed: no error
}

// deliver makes shard's queued Relay calls and returns once those queued
// before it was called are made. One goroutine at a time makes a shard's
// calls, in order; the others wait, which is brief, as Relay methods do not
// block. So a caller's decisions have reached the Relay when it returns: a
// node's own edge is in the Relay when Apply returns, a snapshot when
// Follow does. Called without r.mu.
func (r *router) deliver(shard int) {
	r.out[shard].Flush(func(call func(presence.Relay)) { call(r.relay()) })
}

// follow subscribes to the topics not subscribed yet and waits until the
// Relay has each one's state, unless Redis is known to be down or ctx ends
// first. It waits on Redis for nothing else.
func (r *router) follow(ctx context.Context, topics []presence.Topic) error {
	var wait []chan struct{}
	fresh := map[int][]string{}
	kept := map[int]bool{} // shards of topics followed again before they were dropped
	r.mu.Lock()
	for _, t := range topics {
		name := r.topicName(t)
		ts := r.topics[name]
		if ts == nil {
			ts = &topicState{t: t, shard: r.topicShard(t)}
			r.topics[name] = ts
			fresh[ts.shard] = append(fresh[ts.shard], name)
		}
		ts.followed = true
		if ts.loaded {
			kept[ts.shard] = true
			continue
		}
		ch := make(chan struct{})
		ts.waiters = append(ts.waiters, ch)
		wait = append(wait, ch)
	}
	for s, names := range fresh {
		r.queueSubLocked(s, subOp{names: names})
	}
	r.mu.Unlock()
	for s := range kept {
		r.deliver(s) // its snapshot may still be on its way to the Relay
	}
	if r.health.isDown() {
		return errors.New("cluster: redis unreachable: the state follows when it returns")
	}
	for _, ch := range wait {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// unfollow marks topics nobody on this node follows; sweep drops them a
// renewal interval later, so a follower that comes right back does not pay
// for a new snapshot.
func (r *router) unfollow(topics []presence.Topic) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, t := range topics {
		if ts := r.topics[r.topicName(t)]; ts != nil && ts.followed {
			ts.followed = false
			ts.idle = now
		}
	}
}

// own tells the Relay at once of this node's own user uid or membership
// arriving, if the topic's state is in it, after uid's record: the edge
// from Redis follows, a duplicate the Relay ignores.
func (r *router) own(t presence.Topic, uid string, call func(presence.Relay)) {
	var touched []int
	r.mu.Lock()
	ts := r.topics[r.topicName(t)]
	told := ts != nil && ts.loaded
	if told {
		r.postKnown(uid, &touched)
		r.post(ts.shard, call)
	}
	r.mu.Unlock()
	if told {
		r.deliverTouched(touched, ts.shard)
	}
}

// sweep drops the topics nobody followed for a while. A topic followed again
// afterwards is a new one, subscribed after the unsubscription.
func (r *router) sweep() {
	gone := map[int][]string{}
	r.mu.Lock()
	cutoff := time.Now().Add(-r.cfg.RenewEvery)
	for name, ts := range r.topics {
		if ts.followed || ts.idle.After(cutoff) {
			continue
		}
		delete(r.topics, name)
		gone[ts.shard] = append(gone[ts.shard], name)
		t := ts.t
		if t.Channel != "" {
			r.post(ts.shard, func(rl presence.Relay) { rl.Receive(presence.Event{Kind: presence.EventMembers, Channel: t.Channel}) })
		} else {
			r.post(ts.shard, func(rl presence.Relay) { rl.Receive(presence.Event{Kind: presence.EventUser, UID: t.UID}) })
		}
	}
	for s, names := range gone {
		r.queueSubLocked(s, subOp{names: names, off: true})
	}
	r.sweepKnownLocked(time.Now())
	r.mu.Unlock()
	for s := range gone {
		r.deliver(s)
	}
}

// runState is what Run shares with the goroutines it starts: the shards'
// readers and those that make subscription changes.
type runState struct {
	ctx context.Context
	wg  sync.WaitGroup
}

// queueSubLocked queues a subscription change of shard's Pub/Sub and makes
// sure a goroutine makes it. Nothing happens before Run: Run subscribes to
// every topic followed by then. Called with r.mu held.
func (r *router) queueSubLocked(shard int, op subOp) {
	run := r.run
	if run == nil {
		return
	}
	q := &r.subq[shard]
	if start, _ := q.Push(op); start { // unbounded and never closed: no error
		run.wg.Add(1)
		go func() {
			defer run.wg.Done()
			q.Drain(func(op subOp) { r.makeSub(run, shard, op) })
		}()
	}
}

// makeSub makes one of shard's subscription changes, unless run has ended.
// The shard's Pub/Sub and its reader start with its first subscription, so
// that a Redis Cluster client connects the Pub/Sub to the master of the
// shard's slot.
func (r *router) makeSub(run *runState, shard int, op subOp) {
	if op.lost != nil {
		r.remake(run, shard, op.lost)
		return
	}
	r.mu.Lock()
	if r.run != run {
		r.mu.Unlock()
		return
	}
	ps := r.subs[shard]
	first := ps == nil
	if first {
		if op.off {
			r.mu.Unlock()
			return // nothing to unsubscribe from
		}
		ps = r.rdb.SSubscribe(run.ctx) // connects with its first channels, below
		r.subs[shard] = ps
	}
	r.mu.Unlock()
	if op.off {
		_ = ps.SUnsubscribe(run.ctx, op.names...)
		return
	}
	if err := ps.SSubscribe(run.ctx, op.names...); err != nil && !errors.Is(err, redis.ErrClosed) {
		r.health.fail("subscribe", err) // the reader hears the loss and makes the subscription again
	}
	if first {
		run.wg.Add(1)
		go func() {
			defer run.wg.Done()
			r.readShard(run.ctx, shard, ps)
		}()
	}
}

// runLoop subscribes to what is followed, then drops what nobody followed
// for a while, until ctx is done.
func (r *router) runLoop(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("cluster: Run is already running")
	}
	defer r.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	run := &runState{ctx: ctx}
	r.mu.Lock()
	names := map[int][]string{}
	for name, ts := range r.topics {
		names[ts.shard] = append(names[ts.shard], name)
		ts.live, ts.loaded, ts.stale = false, false, false
	}
	r.run = run
	r.subs = make([]*redis.PubSub, len(r.keys))
	r.subq = make([]queue.Queue[subOp], len(r.keys))
	r.losses = make([]int, len(r.keys))
	for s, ns := range names {
		r.queueSubLocked(s, subOp{names: ns})
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		subs := r.subs
		r.run, r.subs, r.subq, r.losses = nil, nil, nil, nil
		r.mu.Unlock()
		cancel()
		for _, ps := range subs {
			if ps != nil {
				_ = ps.Close()
			}
		}
		run.wg.Wait()
	}()
	r.health.startedReading()
	if fc, ok := r.rdb.(interface{ failoverOptions() *redis.FailoverOptions }); ok {
		run.wg.Add(1)
		go func() {
			defer run.wg.Done()
			r.watchSentinels(ctx, fc.failoverOptions())
		}()
	}

	sweep := time.NewTicker(r.cfg.RenewEvery)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
			r.sweep()
		}
	}
}
