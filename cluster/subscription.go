package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// A shard's subscription can end without its connection failing: Redis 7
// ends the sharded subscriptions of a slot (a server-sent sunsubscribe)
// when the slot changes owner, at a Redis Cluster failover or migration;
// after a Sentinel failover the old master keeps the connection, and its
// pings, while every edge is published on the new one; and go-redis, whose
// Pub/Sub reconnects to the slot owner it knew last, keeps dialling a dead
// master until its cluster map is reloaded, up to a minute later. So the
// shard's reader watches its own connection (receive) and, when it is lost,
// has it made again from scratch (remake): the cluster map reloaded first,
// then a new Pub/Sub subscribed to every topic of the shard. Its topics are
// read again as after any lost subscription.

// Pauses between attempts at a lost subscription: the first is made at once,
// then they double up to the longest, so a shard waiting for its new master
// is heard within half a second of the promotion.
const (
	remakeFirst   = 50 * time.Millisecond
	remakeLongest = 500 * time.Millisecond
)

// receive hands what ps receives to out, and closes out when ps is closed,
// ctx ends, or the connection is lost; the last thing sent before a loss is
// the error. A connection silent for every is pinged; one that does not
// answer in another every is reported silent (a silence), as a frozen Redis
// or a stalled link does, and heard again (a resumed) with the next thing
// it delivers. It is kept meanwhile, since what it delivers late is not
// lost, while Redis answers nobody; once Redis has answered this node's
// other connections for every (answering: since when, zero while it does
// not), a connection still silent is lost: a link that threw its bytes away
// fails no read, and delivers nothing late. Past giveUp without a word it
// is lost in any case (see silenceLimit).
func receive(ctx context.Context, ps *redis.PubSub, out chan<- any, every, giveUp time.Duration, answering func() time.Time) {
	defer close(out)
	var pinged time.Time // when the ping not answered yet was sent
	silent := false
	// lastLook is set once the ping looks lost while Redis answers others:
	// one more short read first, as an answer may be waiting unread after
	// this goroutine was kept from running past its read's deadline (a
	// busy machine), which is no reason to drop a subscription and the
	// messages published while it is made again.
	lastLook := false
	send := func(v any) bool {
		select {
		case out <- v:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		wait := every
		if lastLook {
			wait = every / 2
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		switch {
		case err == nil:
			pinged, lastLook = time.Time{}, false
			if silent {
				silent = false
				if !send(resumed{}) {
					return
				}
			}
			if !send(msg) {
				return
			}
		case errors.Is(err, redis.ErrClosed) || ctx.Err() != nil:
			return
		case isTimeout(err) && pinged.IsZero():
			pinged = time.Now()
			if err := ps.Ping(ctx); err != nil {
				send(fmt.Errorf("ping: %w", err))
				return
			}
		case isTimeout(err) && !lastLook && time.Since(pinged) >= every && answersOthers(answering(), pinged, every):
			lastLook = true
		case isTimeout(err) && lastLook:
			send(fmt.Errorf("no answer to a ping within %v, while redis answers this node's other connections", time.Since(pinged).Round(time.Millisecond)))
			return
		case isTimeout(err) && time.Since(pinged) < giveUp:
			if !silent {
				silent = true
				if !send(silence{fmt.Errorf("no answer to a ping within %v", every)}) {
					return
				}
			}
		case isTimeout(err):
			send(fmt.Errorf("no answer to a ping within %v", giveUp))
			return
		default:
			// go-redis would dial the slot owner it knew last, again and
			// again: the subscription is made anew instead.
			send(err)
			return
		}
	}
}

// answersOthers reports whether Redis, answering other connections since
// since (zero: it does not), has for every while a ping sent at pinged got
// no answer.
func answersOthers(since, pinged time.Time, every time.Duration) bool {
	if since.IsZero() {
		return false
	}
	if since.Before(pinged) {
		since = pinged
	}
	return time.Since(since) >= every
}

// silence says that a subscription's connection does not answer a ping;
// resumed that it delivers again.
type (
	silence struct{ err error }
	resumed struct{}
)

// silenceLimit is how long a subscription may stay silent before it is
// made again: long, as making it again loses every message published
// until the new one is confirmed, while a frozen Redis or a stalled link
// delivers them late on the connection kept. Two node leases, a minute at
// least: by then the node was taken for dead and writes everything again.
func silenceLimit(lease time.Duration) time.Duration { return max(2*lease, time.Minute) }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// lose marks shard's subscription ps lost for err and has it made again,
// after a pause that grows with the losses in a row. A loss of a Pub/Sub
// that is no longer the shard's is stale and ignored.
func (r *router) lose(shard int, ps *redis.PubSub, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.run
	if run == nil || r.subs[shard] != ps {
		return
	}
	n := r.losses[shard]
	r.losses[shard]++
	if r.health.lost(shard, err) {
		r.log.Warn("cluster: lost the subscription of a shard; making it again", "shard", shard, "err", err)
	}
	if n == 0 {
		r.queueSubLocked(shard, subOp{lost: ps})
		return
	}
	pause := min(remakeFirst<<min(n-1, 10), remakeLongest)
	time.AfterFunc(pause, func() { // after Run ended, it finds another run or none, and does nothing
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.run == run {
			r.queueSubLocked(shard, subOp{lost: ps})
		}
	})
}

// silent records that shard's current Pub/Sub ps does not answer: the
// shard is not heard, though its connection is kept for what it delivers
// late.
func (r *router) silent(shard int, ps *redis.PubSub, err error) {
	r.mu.Lock()
	current := r.run != nil && r.subs[shard] == ps
	r.mu.Unlock()
	if current && r.health.lost(shard, err) {
		r.log.Warn("cluster: a shard's subscription does not answer; waiting for it", "shard", shard, "err", err)
	}
}

// confirmed records that shard's current Pub/Sub ps delivers again, or that
// Redis confirmed one of its subscriptions: the shard is heard.
func (r *router) confirmed(shard int, ps *redis.PubSub) {
	r.mu.Lock()
	current := r.run != nil && r.subs[shard] == ps
	if current {
		r.losses[shard] = 0
	}
	r.mu.Unlock()
	if !current {
		return
	}
	r.health.ok()
	if d := r.health.heard(shard); d > 0 {
		r.log.Info("cluster: hearing the shard again", "shard", shard, "after", d.Round(time.Millisecond))
	}
}

// remake replaces shard's lost Pub/Sub with a new one subscribed to every
// topic of the shard, and starts its reader. Its topics are marked not live,
// so that Redis's confirmations have them read again (see subscribed). Made
// by the shard's subscription goroutine, in order with its other changes.
func (r *router) remake(run *runState, shard int, lost *redis.PubSub) {
	r.mu.Lock()
	if r.run != run || r.subs[shard] != lost {
		r.mu.Unlock()
		return
	}
	var names []string
	for name, ts := range r.topics {
		if ts.shard == shard {
			names = append(names, name)
			ts.live = false
		}
	}
	r.subs[shard] = nil
	r.mu.Unlock()
	_ = lost.Close()
	if len(names) == 0 {
		// Nothing followed there to hear: the shard is not deaf, and the
		// next topic followed makes a new Pub/Sub.
		r.health.heard(shard)
		return
	}
	r.reloadTopology(run.ctx, names[0])
	ps := r.rdb.SSubscribe(run.ctx)
	r.mu.Lock()
	if r.run != run {
		r.mu.Unlock()
		_ = ps.Close()
		return
	}
	r.subs[shard] = ps
	r.mu.Unlock()
	// An error here comes back to the reader, from its first receive.
	_ = ps.SSubscribe(run.ctx, names...)
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		r.readShard(run.ctx, shard, ps)
	}()
}

// reloadTopology has a Redis Cluster client read the cluster's map of slots
// before a lost subscription is made again, and waits (a few seconds at
// most) until the map names a master of name's slot that says it is one:
// an old master that became a replica may still accept the subscription
// and then never deliver the new master's messages. go-redis reloads the
// map in the background, so it is asked again while it names a replica.
func (r *router) reloadTopology(ctx context.Context, name string) {
	cc, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		r.reloadMap()
		select {
		case <-ctx.Done():
			return
		case <-time.After(remakeFirst):
		}
		if m, err := cc.MasterForKey(ctx, name); err == nil {
			if role, err := m.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
				return
			}
		}
	}
}

// reloadMap has a Redis Cluster client read the cluster's map of slots
// again, in the background: go-redis does by itself only on some errors,
// and otherwise every minute.
func (b *base) reloadMap() {
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// remakeAll has every shard's subscription made again: Sentinel announced
// a new master, and the Pub/Sub connections are still on the old one.
func (r *router) remakeAll(why error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run == nil {
		return
	}
	for shard, ps := range r.subs {
		if ps == nil {
			continue
		}
		r.losses[shard] = 0 // at once: the new master is known
		r.health.lost(shard, why)
		r.losses[shard]++
		r.queueSubLocked(shard, subOp{lost: ps})
	}
}
