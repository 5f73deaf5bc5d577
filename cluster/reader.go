package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
)

// topicState is one channel or user this node follows. Edges carry the
// shard's edge counter: once a snapshot at seq is in the Relay, an edge at
// or below seq is already in it.
type topicState struct {
	t       presence.Topic
	shard   int
	refs    int
	seq     int64
	live    bool // Redis confirmed the subscription: a snapshot now misses no edge
	loaded  bool // a snapshot reached the Relay since the following began
	stale   bool // re-subscribed after a lost connection: edges pass unfiltered until the next snapshot
	waiters []chan struct{}
	idle    time.Time // when refs dropped to 0
}

func (e *Engine) topicShard(t presence.Topic) int {
	if t.Channel != "" {
		return e.shard(t.Channel)
	}
	return e.shard(t.UID)
}

func (e *Engine) topicName(t presence.Topic) string {
	k := e.keys[e.topicShard(t)]
	if t.Channel != "" {
		return k.channelTopic(t.Channel)
	}
	return k.userTopic(t.UID)
}

// Follow subscribes this node to topics and waits until the Relay has each
// one's current state, unless Redis is known to be down or ctx ends first.
func (e *Engine) Follow(ctx context.Context, topics []presence.Topic) error {
	var wait []chan struct{}
	fresh := map[int][]string{}
	e.fmu.Lock()
	for _, t := range topics {
		name := e.topicName(t)
		ts := e.topics[name]
		if ts == nil {
			ts = &topicState{t: t, shard: e.topicShard(t)}
			e.topics[name] = ts
			fresh[ts.shard] = append(fresh[ts.shard], name)
		}
		ts.refs++
		if !ts.loaded {
			ch := make(chan struct{})
			ts.waiters = append(ts.waiters, ch)
			wait = append(wait, ch)
		}
	}
	e.fmu.Unlock()
	for s, names := range fresh {
		e.subscribe(s, names)
	}
	if e.isDown() {
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

// Unfollow counts one follower less of each topic. A topic nobody follows is
// unsubscribed and dropped from the Relay a renewal interval later, so a
// follower that comes right back does not pay for a new snapshot.
func (e *Engine) Unfollow(topics []presence.Topic) {
	e.fmu.Lock()
	defer e.fmu.Unlock()
	now := time.Now()
	for _, t := range topics {
		if ts := e.topics[e.topicName(t)]; ts != nil && ts.refs > 0 {
			if ts.refs--; ts.refs == 0 {
				ts.idle = now
			}
		}
	}
}

// sweep drops the topics nobody followed for a while.
func (e *Engine) sweep(ctx context.Context, r presence.Relay) {
	gone := map[int][]string{}
	e.fmu.Lock()
	cutoff := time.Now().Add(-e.cfg.RenewEvery)
	for name, ts := range e.topics {
		if ts.refs > 0 || ts.idle.After(cutoff) {
			continue
		}
		delete(e.topics, name)
		gone[ts.shard] = append(gone[ts.shard], name)
		if ts.t.Channel != "" {
			r.SetMembers(ts.t.Channel, nil)
		} else {
			r.UserChanged(ts.t.UID, false)
		}
	}
	subs := e.subs
	e.fmu.Unlock()
	for s, names := range gone {
		if subs != nil && subs[s] != nil {
			_ = subs[s].SUnsubscribe(ctx, names...)
		}
	}
	// A topic followed again meanwhile may have had its subscription
	// overtaken by the unsubscription: subscribe it again.
	again := map[int][]string{}
	e.fmu.Lock()
	for s, names := range gone {
		for _, name := range names {
			if e.topics[name] != nil {
				again[s] = append(again[s], name)
			}
		}
	}
	e.fmu.Unlock()
	for s, names := range again {
		e.subscribe(s, names)
	}
}

// runState is what Run shares with subscribe: the shards' Pub/Subs start on
// the first topic, so that a Redis Cluster client connects each one to the
// master of its shard's slot.
type runState struct {
	ctx   context.Context
	relay presence.Relay
	wg    sync.WaitGroup
}

// subscribe subscribes shard's Pub/Sub to names, starting it and its reader
// if it is the shard's first topic. Nothing happens before Run: Run
// subscribes to every topic followed by then.
func (e *Engine) subscribe(shard int, names []string) {
	e.fmu.Lock()
	run := e.run
	if run == nil {
		e.fmu.Unlock()
		return
	}
	ps := e.subs[shard]
	first := ps == nil
	if first {
		ps = e.rdb.SSubscribe(run.ctx) // connects with its first channels, below
		e.subs[shard] = ps
		run.wg.Add(1)
	}
	e.fmu.Unlock()
	if err := ps.SSubscribe(run.ctx, names...); err != nil {
		e.fail("subscribe", err) // the Pub/Sub subscribes again when it reconnects
	}
	if first {
		go func() {
			defer run.wg.Done()
			e.readShard(run.ctx, shard, ps, run.relay)
		}()
	}
}

// Run delivers, until ctx is done, the edges and messages of the topics this
// node follows to r, and passes the edges this node's scripts make to r's
// Produced. It keeps one sharded Pub/Sub subscription per shard; when one is
// lost and comes back, the topics it carries are read again once every live
// node has had a renewal round to write what Redis may have lost. It
// retries Redis forever and returns nil when ctx is done; it returns an
// error only while another Run is going.
func (e *Engine) Run(ctx context.Context, r presence.Relay) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("cluster: Run is already running")
	}
	defer e.running.Store(false)
	e.relay.Store(&relayBox{r})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	run := &runState{ctx: ctx, relay: r}
	e.fmu.Lock()
	names := map[int][]string{}
	for name, ts := range e.topics {
		names[ts.shard] = append(names[ts.shard], name)
		ts.live, ts.loaded, ts.stale = false, false, false
	}
	e.run = run
	e.subs = make([]*redis.PubSub, len(e.keys))
	e.fmu.Unlock()
	defer func() {
		e.fmu.Lock()
		subs := e.subs
		e.run, e.subs = nil, nil
		e.fmu.Unlock()
		cancel()
		for _, ps := range subs {
			if ps != nil {
				_ = ps.Close()
			}
		}
		run.wg.Wait()
	}()
	for s, ns := range names {
		e.subscribe(s, ns)
	}
	e.readyOnce.Do(func() { close(e.ready) })

	sweep := time.NewTicker(e.cfg.RenewEvery)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
			e.sweep(ctx, r)
		}
	}
}

// wireEvent is what arrives on a topic: an edge (S set) or a message.
type wireEvent struct {
	S          int64           `json:"s"`
	On         int             `json:"on"`
	UID        string          `json:"u"`
	Joined     int             `json:"j"`
	Frame      json.RawMessage `json:"f"`
	Disconnect int             `json:"x"`
}

// readShard relays one shard's subscription. Snapshots are read on this
// goroutine, so the events that follow one wait behind it, in order.
func (e *Engine) readShard(ctx context.Context, shard int, ps *redis.PubSub, r presence.Relay) {
	in := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024), redis.WithChannelHealthCheckInterval(min(e.cfg.RenewEvery, 3*time.Second)))
	var again <-chan time.Time // snapshots of stale topics are due
	for {
		select {
		case <-ctx.Done():
			return
		case <-again:
			again = nil
			if !e.snapshot(ctx, shard, r, func(ts *topicState) bool { return ts.live && (ts.stale || !ts.loaded) }) {
				again = time.After(e.retry)
			}
		case msg, ok := <-in:
			if !ok {
				return
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind != "ssubscribe" {
					continue
				}
				e.ok()
				if e.subscribed(m.Channel) {
					// A lost connection came back: wait until every live
					// node has written again what Redis may have lost.
					again = time.After(e.cfg.RenewEvery + 2*e.retry)
				} else if !e.snapshot(ctx, shard, r, func(ts *topicState) bool { return ts.live && !ts.loaded }) && again == nil {
					again = time.After(e.retry)
				}
			case *redis.Message:
				e.received(m.Channel, m.Payload, r)
			}
		}
	}
}

// subscribed marks a topic whose subscription was confirmed; it reports
// whether the topic had been loaded before, i.e. this is a re-subscription.
func (e *Engine) subscribed(name string) bool {
	e.fmu.Lock()
	defer e.fmu.Unlock()
	ts := e.topics[name]
	if ts == nil {
		return false
	}
	ts.live = true
	if !ts.loaded {
		return false
	}
	ts.stale = true
	return true
}

// snapshot reads the state of the shard's topics that want one and hands it
// to r. It reports false if Redis failed.
func (e *Engine) snapshot(ctx context.Context, shard int, r presence.Relay, want func(*topicState) bool) bool {
	e.fmu.Lock()
	var channels, users []string
	for _, ts := range e.topics {
		if ts.shard != shard || !want(ts) {
			continue
		}
		if ts.t.Channel != "" {
			channels = append(channels, ts.t.Channel)
		} else {
			users = append(users, ts.t.UID)
		}
	}
	e.fmu.Unlock()
	if len(channels)+len(users) == 0 {
		return true
	}
	k := e.keys[shard]
	ctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	pipe := e.rdb.Pipeline()
	chCmds := make([]*redis.Cmd, len(channels))
	for i, ch := range channels {
		chCmds[i] = channelScript.EvalSha(ctx, pipe, []string{k.alive}, k.tag, ch)
	}
	var userCmd *redis.Cmd
	if len(users) > 0 {
		args := append([]any{k.tag}, toAny(users)...)
		userCmd = usersScript.EvalSha(ctx, pipe, []string{k.alive}, args...)
	}
	_, err := pipe.Exec(ctx)
	if isNoScript(err) {
		// Redis lost its script cache: load the scripts and read again.
		for _, s := range []*redis.Script{channelScript, usersScript} {
			if lerr := s.Load(ctx, e.rdb).Err(); lerr != nil {
				err = lerr
			}
		}
		if err == nil || isNoScript(err) {
			return e.snapshot(ctx, shard, r, want)
		}
	}
	if err != nil {
		e.fail("snapshot", err)
		return false
	}
	e.ok()
	e.fmu.Lock()
	defer e.fmu.Unlock()
	for i, ch := range channels {
		vals := chCmds[i].Val().([]any)
		members := make([]string, 0, len(vals)-1)
		for _, v := range vals[1:] {
			members = append(members, v.(string))
		}
		e.mu.Lock()
		for uid := range e.localMembers[ch] {
			if !slices.Contains(members, uid) {
				members = append(members, uid)
			}
		}
		e.mu.Unlock()
		if ts := e.topics[k.channelTopic(ch)]; ts != nil {
			r.SetMembers(ch, members)
			e.loaded(ts, vals[0].(int64))
		}
	}
	if userCmd != nil {
		vals := userCmd.Val().([]any)
		for i, uid := range users {
			if ts := e.topics[k.userTopic(uid)]; ts != nil {
				r.UserChanged(uid, flag(vals[i+1]) || e.holds("", uid))
				e.loaded(ts, vals[0].(int64))
			}
		}
	}
	return true
}

func (e *Engine) loaded(ts *topicState, seq int64) {
	ts.seq, ts.loaded, ts.stale = seq, true, false
	for _, ch := range ts.waiters {
		close(ch)
	}
	ts.waiters = nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// received relays one event of a followed topic.
func (e *Engine) received(name, payload string, r presence.Relay) {
	e.m.received.Inc()
	var ev wireEvent
	if err := json.Unmarshal([]byte(payload), &ev); err != nil {
		e.log.Warn("cluster: a message on a topic is not ours", "topic", name, "err", err)
		return
	}
	e.fmu.Lock()
	defer e.fmu.Unlock()
	ts := e.topics[name]
	if ts == nil {
		return // unsubscribed meanwhile
	}
	t := ts.t
	if ev.S == 0 {
		e.m.relayed.WithLabelValues("message").Inc()
		r.Deliver(presence.Message{Channel: t.Channel, UID: t.UID, Frame: ev.Frame, Disconnect: ev.Disconnect == 1})
		return
	}
	if ts.loaded && !ts.stale {
		if ev.S <= ts.seq {
			return // the snapshot has it
		}
		ts.seq = ev.S
	}
	if t.Channel != "" {
		if ev.Joined == 0 && e.holds(t.Channel, ev.UID) {
			return // our own membership is on its way to Redis
		}
		e.m.relayed.WithLabelValues("member").Inc()
		r.MemberChanged(t.Channel, ev.UID, ev.Joined == 1)
		return
	}
	if ev.On == 0 && e.holds("", t.UID) {
		return // our own connection is on its way to Redis
	}
	e.m.relayed.WithLabelValues("user").Inc()
	r.UserChanged(t.UID, ev.On == 1)
}
