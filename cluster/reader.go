package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
)

// delivery is what a stream reader hands to Run's loop.
type delivery struct {
	edges     []edgeEvent
	recovered bool // the reader got through again after failing
}

type edgeEvent struct {
	uid string
	on  bool
}

// Run relays presence edges from the event streams, and chat from Pub/Sub, to
// r until ctx is done. It keeps a view of who is online cluster-wide so that
// r sees each edge once even when Redis replays or re-asserts, and after an
// outage it reconciles that view with Redis (users whose only node died
// meanwhile go offline then). It retries Redis forever and returns nil when
// ctx is done; it returns an error only while another Run is going.
func (e *Engine) Run(ctx context.Context, r presence.Relay) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("cluster: Run is already running")
	}
	defer e.running.Store(false)
	e.attach(r)
	cursors, view, ok := e.bootstrap(ctx)
	if !ok {
		return nil
	}
	in := make(chan delivery, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	ps := e.rdb.Subscribe(ctx, e.chat)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		e.fail("subscribe", err) // the Pub/Sub reconnects by itself
	}
	chat := ps.Channel()

	var groups [][]int
	if e.isCluster {
		// Redis Cluster refuses a multi-key XREAD across slots.
		for s := range e.keys {
			groups = append(groups, []int{s})
		}
	} else {
		all := make([]int, len(e.keys))
		for s := range all {
			all[s] = s
		}
		groups = [][]int{all}
	}
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.readStreams(ctx, g, cursors, in)
		}()
	}
	e.readyOnce.Do(func() { close(e.ready) })

	var reconcile <-chan time.Time
	// Every live node re-asserts its leases within one renewal after Redis is
	// back; reconciling earlier would take their users offline.
	settle := e.cfg.RenewEvery + 2*e.retry
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-chat:
			if !ok {
				return nil
			}
			var w wireMessage
			if err := json.Unmarshal([]byte(m.Payload), &w); err != nil {
				e.log.Warn("cluster: a message on Pub/Sub is not ours", "err", err)
				continue
			}
			e.m.relayed.WithLabelValues("chat").Inc()
			r.Deliver(presence.Message{Channel: w.Channel, UID: w.UID, Frame: w.Frame})
		case <-e.resync:
			reconcile = time.After(settle)
		case d := <-in:
			if d.recovered {
				reconcile = time.After(settle)
			}
			for _, ev := range d.edges {
				e.relayEdge(view, r, ev.uid, ev.on)
			}
		case <-reconcile:
			reconcile = nil
			if err := e.reconcile(ctx, view, r); err != nil {
				reconcile = time.After(e.retry)
			}
		}
	}
}

// relayEdge applies one edge to view and passes it on if it changes it.
func (e *Engine) relayEdge(view map[string]struct{}, r presence.Relay, uid string, on bool) {
	_, was := view[uid]
	if was == on {
		return
	}
	kind := "offline"
	if on {
		view[uid] = struct{}{}
		kind = "online"
	} else {
		delete(view, uid)
	}
	e.m.relayed.WithLabelValues(kind).Inc()
	r.UserChanged(uid, on)
}

// bootstrap reads where each stream ends, then who is online: edges after
// those positions are applied on top of that view. It retries until it gets
// through or ctx is done.
func (e *Engine) bootstrap(ctx context.Context) ([]string, map[string]struct{}, bool) {
	for {
		cursors, err := e.streamEnds(ctx)
		if err == nil {
			var view map[string]struct{}
			if view, err = e.onlineSet(ctx); err == nil {
				e.ok()
				return cursors, view, true
			}
		}
		e.fail("bootstrap", err)
		select {
		case <-ctx.Done():
			return nil, nil, false
		case <-time.After(e.retry):
		}
	}
}

func (e *Engine) streamEnds(ctx context.Context) ([]string, error) {
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(e.keys))
	for i, k := range e.keys {
		cmds[i] = pipe.XRevRangeN(ctx, k.events, "+", "-", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	cursors := make([]string, len(e.keys))
	for i, c := range cmds {
		cursors[i] = "0-0"
		if msgs := c.Val(); len(msgs) > 0 {
			cursors[i] = msgs[0].ID
		}
	}
	return cursors, nil
}

func (e *Engine) onlineSet(ctx context.Context) (map[string]struct{}, error) {
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(e.keys))
	for i, k := range e.keys {
		cmds[i] = pipe.ZRange(ctx, k.online, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	view := make(map[string]struct{})
	for _, c := range cmds {
		for _, uid := range c.Val() {
			view[uid] = struct{}{}
		}
	}
	return view, nil
}

// reconcile makes view match Redis and relays the differences.
func (e *Engine) reconcile(ctx context.Context, view map[string]struct{}, r presence.Relay) error {
	fresh, err := e.onlineSet(ctx)
	if err != nil {
		e.fail("reconcile", err)
		return err
	}
	e.ok()
	var on, off int
	for uid := range view {
		if _, ok := fresh[uid]; !ok {
			e.relayEdge(view, r, uid, false)
			off++
		}
	}
	for uid := range fresh {
		if _, ok := view[uid]; !ok {
			e.relayEdge(view, r, uid, true)
			on++
		}
	}
	if on+off > 0 {
		e.log.Info("cluster: reconciled presence with redis", "online", on, "offline", off)
	}
	return nil
}

// readStreams reads the event streams of shards (one XREAD for all of them)
// and sends the edges to in, in stream order.
func (e *Engine) readStreams(ctx context.Context, shards []int, cursors []string, in chan<- delivery) {
	n := len(shards)
	args := make([]string, 2*n)
	for i, s := range shards {
		args[i] = e.keys[s].events
		args[n+i] = cursors[s]
	}
	failed := false
	send := func(d delivery) bool {
		select {
		case in <- d:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		res, err := e.rdb.XRead(ctx, &redis.XReadArgs{Streams: args, Count: 1024, Block: e.block}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return
			}
			failed = true
			e.fail("read events", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(e.retry):
			}
			continue
		}
		e.ok()
		var d delivery
		if failed {
			failed = false
			d.recovered = true
		}
		for _, st := range res {
			s, ok := e.shardOf[st.Stream]
			if !ok {
				continue
			}
			for i, want := range shards {
				if want == s {
					if len(st.Messages) > 0 {
						args[n+i] = st.Messages[len(st.Messages)-1].ID
					}
					break
				}
			}
			for _, msg := range st.Messages {
				uid, _ := msg.Values["u"].(string)
				on, _ := msg.Values["on"].(string)
				if uid == "" {
					continue
				}
				d.edges = append(d.edges, edgeEvent{uid: uid, on: on == "1"})
			}
		}
		if (d.recovered || len(d.edges) > 0) && !send(d) {
			return
		}
	}
}
