package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// wireEvent is what arrives on a topic: an edge (S set) or a message.
type wireEvent struct {
	S      int64                `json:"s"`
	On     int                  `json:"on"`
	UID    string               `json:"u"`
	Joined int                  `json:"j"`
	Frame  json.RawMessage      `json:"f"`
	Type   string               `json:"t"`
	Kind   presence.MessageKind `json:"k"`
	From   string               `json:"fr"`
	At     int64                `json:"at"` // an offline edge's time, Unix ms on the Redis clock
	// Act marks an activity edge: actAway or actActive.
	Act int `json:"a"`
	// R is a user's record (JSON), in a change of it or a join edge; RV its
	// version where S is not (a channel's topic), H when the user turned
	// invisible (ms). At is the change's time.
	R  string `json:"r"`
	RV int64  `json:"rv"`
	H  int64  `json:"h"`
}

// The values of wireEvent.Act.
const (
	actAway   = 1
	actActive = 2
)

// readShard reads one shard's subscription until ps is closed or lost.
// Snapshots are read on this goroutine, so the events that follow one wait
// behind it, in order.
func (r *router) readShard(ctx context.Context, shard int, ps *redis.PubSub) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := make(chan any, 1024)
	go receive(ctx, ps, in, min(r.cfg.RenewEvery, 3*time.Second), silenceLimit(r.cfg.Timeout), r.health.answering)
	var again <-chan time.Time // snapshots of stale topics are due
	for {
		select {
		case <-ctx.Done():
			return
		case <-again:
			again = nil
			if ok, wait := r.snapshot(ctx, shard, func(ts *topicState) bool { return ts.live && (ts.stale || !ts.loaded) }); !ok {
				again = time.After(r.retry)
			} else if wait > 0 {
				again = time.After(wait)
			}
		case msg, ok := <-in:
			if !ok {
				return
			}
			switch m := msg.(type) {
			case error:
				r.lose(shard, ps, m)
				return
			case silence:
				r.silent(shard, ps, m.err)
			case resumed:
				r.confirmed(shard, ps)
			case *redis.Subscription:
				switch m.Kind {
				case "ssubscribe":
					r.confirmed(shard, ps)
					if r.subscribed(m.Channel) {
						// A lost subscription is back: wait until every
						// live node has written again what Redis may have
						// lost.
						again = time.After(r.cfg.RenewEvery + 2*r.retry)
					} else if ok, _ := r.snapshot(ctx, shard, func(ts *topicState) bool { return ts.live && !ts.loaded }); !ok && again == nil {
						again = time.After(r.retry)
					}
				case "sunsubscribe":
					if r.following(m.Channel) {
						r.lose(shard, ps, fmt.Errorf("redis ended the subscription to %s: its slot changed owner (a failover or a slot migration)", m.Channel))
						return
					}
				}
			case *redis.Message:
				r.received(m.Channel, m.Payload)
			}
		}
	}
}

// following reports whether the topic of a Pub/Sub channel is this node's:
// one that is not was unsubscribed by this node.
func (r *router) following(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topics[name] != nil
}

// subscribed marks a topic whose subscription was confirmed; it reports
// whether the topic had been loaded before, i.e. this is a re-subscription.
func (r *router) subscribed(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := r.topics[name]
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
// to the Relay. It reports false if Redis failed. A topic read again after a
// lost subscription keeps its state while the shard's restore window is
// open, as nodes may not have restored what Redis lost yet: it reports how
// long to wait then.
func (r *router) snapshot(ctx context.Context, shard int, want func(*topicState) bool) (bool, time.Duration) {
	r.mu.Lock()
	var channels, users []string
	for _, ts := range r.topics {
		if ts.shard != shard || !want(ts) {
			continue
		}
		if ts.t.Channel != "" {
			channels = append(channels, ts.t.Channel)
		} else {
			users = append(users, ts.t.UID)
		}
	}
	r.mu.Unlock()
	if len(channels)+len(users) == 0 {
		return true, 0
	}
	k := r.keys[shard]
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	pipe := r.rdb.Pipeline()
	chCmds := make([]*redis.Cmd, len(channels))
	for i, ch := range channels {
		chCmds[i] = channelScript.EvalSha(ctx, pipe, k.keys, k.tag, ch)
	}
	var userCmd *redis.Cmd
	if len(users) > 0 {
		args := append([]any{k.tag, r.cfg.LastSeenTTL.Milliseconds()}, toAny(users)...)
		userCmd = usersScript.EvalSha(ctx, pipe, k.keys, args...)
	}
	_, err := pipe.Exec(ctx)
	err = usersScript.explain(channelScript.explain(err))
	if isNoScript(err) {
		// Redis lost its script cache: load the scripts and read again.
		for _, s := range []*luaScript{channelScript, usersScript} {
			if lerr := s.Load(ctx, r.rdb).Err(); lerr != nil {
				err = lerr
			}
		}
		if err == nil || isNoScript(err) {
			return r.snapshot(ctx, shard, want)
		}
	}
	if err != nil {
		r.health.fail("snapshot", err)
		return false, 0
	}
	r.health.ok()
	var wait time.Duration
	early := func(ts *topicState, left any) bool {
		ms, _ := left.(int64)
		if ms > 0 && ts.stale {
			wait = max(wait, time.Duration(ms)*time.Millisecond+r.retry)
			return true
		}
		return false
	}
	var touched []int
	r.mu.Lock()
	for i, ch := range channels {
		vals := chCmds[i].Val().([]any)
		members, away := stringList(vals[1]), stringList(vals[2])
		if ts := r.topics[k.channelTopic(ch)]; ts != nil && !early(ts, vals[3]) {
			r.learnCopies(stringList(vals[4]))
			members, away = r.w.addMembers(ch, members, away)
			for _, uid := range members {
				r.postKnown(uid, &touched)
			}
			r.post(shard, func(rl presence.Relay) {
				rl.Receive(presence.Event{Kind: presence.EventMembers, Channel: ch, Members: members, Away: away})
			})
			r.loaded(ts, vals[0].(int64))
		}
	}
	if userCmd != nil {
		vals := userCmd.Val().([]any)
		seq, _ := vals[0].(int64)
		for i, uid := range users {
			if ts := r.topics[k.userTopic(uid)]; ts != nil && !early(ts, vals[1]) {
				state, _ := vals[2+4*i].(int64)
				seen, _ := vals[3+4*i].(int64)
				hid, _ := vals[4+4*i].(int64)
				raw, _ := vals[5+4*i].(string)
				if kr, news := r.learn(uid, seq, hid, 0, raw, true); news {
					r.postRecord(uid, kr.rec, kr.hiddenAt(), &touched)
					r.w.queueRepublish(uid, kr) // a change missed while the subscription was down
				} else {
					r.postKnown(uid, &touched)
				}
				on := state > 0 || r.w.holds("", uid)
				away := state == 2 && !r.w.holdsActive("", uid)
				var at time.Time
				if !on && seen > 0 {
					at = time.UnixMilli(seen) // for a watching frame's last_seen
				}
				r.wentOffline(uid, !on)
				r.post(shard, func(rl presence.Relay) {
					rl.Receive(presence.Event{Kind: presence.EventUser, UID: uid, On: on, At: at})
					if on {
						rl.Receive(presence.Event{Kind: presence.EventActivity, UID: uid, On: away})
					}
				})
				r.loaded(ts, seq)
			}
		}
	}
	r.mu.Unlock()
	r.deliverTouched(touched, shard)
	return true, wait
}

// loaded records that ts's snapshot at seq is decided; its waiters are
// released once the snapshot is in the Relay. Called with r.mu held.
func (r *router) loaded(ts *topicState, seq int64) {
	ts.seq, ts.loaded, ts.stale = seq, true, false
	if len(ts.waiters) > 0 {
		waiters := ts.waiters
		ts.waiters = nil
		r.post(ts.shard, func(presence.Relay) {
			for _, ch := range waiters {
				close(ch)
			}
		})
	}
}

// stringList reads an array of strings a script returned.
func stringList(v any) []string {
	vals, _ := v.([]any)
	out := make([]string, 0, len(vals))
	for _, v := range vals {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// received relays one event of a followed topic.
func (r *router) received(name, payload string) {
	r.m.received.Inc()
	var ev wireEvent
	if err := json.Unmarshal([]byte(payload), &ev); err != nil {
		r.log.Warn("cluster: a message on a topic is not ours", "topic", name, "err", err)
		return
	}
	var touched []int
	r.mu.Lock()
	ts := r.topics[name]
	if ts == nil {
		r.mu.Unlock()
		return // unsubscribed meanwhile
	}
	if call := r.decide(ts, ev, &touched); call != nil {
		r.post(ts.shard, call)
	}
	r.mu.Unlock()
	r.deliverTouched(touched, ts.shard)
}

// decide returns the Relay call for an event of ts, or nil if the Relay has
// it already; the calls of records go on their users' queues, added to
// touched. Called with r.mu held.
func (r *router) decide(ts *topicState, ev wireEvent, touched *[]int) func(presence.Relay) {
	t := ts.t
	if ev.S == 0 {
		r.m.relayed.WithLabelValues("message").Inc()
		m := presence.Message{Kind: ev.Kind, Channel: t.Channel, UID: t.UID, From: ev.From,
			Frame: protocol.Encoded{Type: ev.Type, Data: ev.Frame}}
		if m.Kind == presence.MessageDisconnect {
			// Closing connections calls back into their Node, and so into
			// this engine: do it on a goroutine of its own, once what came
			// before it is delivered, so that nobody waits on a goroutine
			// that is inside the Node.
			return func(rl presence.Relay) { go rl.Receive(presence.Event{Kind: presence.EventMessage, Message: m}) }
		}
		return func(rl presence.Relay) { rl.Receive(presence.Event{Kind: presence.EventMessage, Message: m}) }
	}
	if ts.loaded && !ts.stale {
		if ev.S <= ts.seq {
			return nil // the snapshot has it
		}
		ts.seq = ev.S
	}
	if ev.Act != 0 {
		return r.decideActivity(t, ev)
	}
	if ev.R != "" && ev.Joined == 0 {
		r.decideRecord(ts, ev, touched)
		return nil
	}
	if t.Channel != "" {
		if ev.Joined == 0 && r.w.holds(t.Channel, ev.UID) {
			return nil // our own membership is on its way to Redis
		}
		r.m.relayed.WithLabelValues("member").Inc()
		uid, joined := ev.UID, ev.Joined == 1
		if joined {
			// The Relay decides at the join whether the member is
			// invisible: it has the record first.
			if ev.R != "" {
				r.learn(uid, ev.RV, ev.H, 0, ev.R, true)
			}
			r.postKnown(uid, touched)
		}
		return func(rl presence.Relay) {
			rl.Receive(presence.Event{Kind: presence.EventMember, Channel: t.Channel, UID: uid, On: joined})
		}
	}
	if ev.On == 0 && r.w.holds("", t.UID) {
		return nil // our own connection is on its way to Redis
	}
	r.m.relayed.WithLabelValues("user").Inc()
	on, at := ev.On == 1, time.Time{}
	if on {
		r.postKnown(t.UID, touched) // the Relay forgot it when the user went
	}
	r.wentOffline(t.UID, !on)
	if ev.At > 0 {
		at = time.UnixMilli(ev.At)
	}
	return func(rl presence.Relay) {
		rl.Receive(presence.Event{Kind: presence.EventUser, UID: t.UID, On: on, At: at})
	}
}

// decideActivity returns the Relay call for an away or active edge of a
// user or a channel member. An away edge is dropped while this node holds
// the user active (or the membership, saying active): its own change is on
// its way to Redis, which then emits the active edge. Called with r.mu held.
func (r *router) decideActivity(t presence.Topic, ev wireEvent) func(presence.Relay) {
	away := ev.Act == actAway
	if t.Channel != "" {
		if away && r.w.holdsActive(t.Channel, ev.UID) {
			return nil
		}
		r.m.relayed.WithLabelValues("member_activity").Inc()
		uid := ev.UID
		return func(rl presence.Relay) {
			rl.Receive(presence.Event{Kind: presence.EventActivity, Channel: t.Channel, UID: uid, On: away})
		}
	}
	if away && r.w.holdsActive("", t.UID) {
		return nil
	}
	r.m.relayed.WithLabelValues("activity").Inc()
	return func(rl presence.Relay) {
		rl.Receive(presence.Event{Kind: presence.EventActivity, UID: t.UID, On: away})
	}
}
