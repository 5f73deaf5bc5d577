package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/presenced/presenced/bench/internal/child"
)

// kind is a kind of fault the nemesis draws.
type kind string

const (
	nodeKill         kind = "node-kill"       // SIGKILL, restart 0.5-3 s later
	nodeTerm         kind = "node-term"       // SIGTERM, restart 0-2 s after the exit
	nodeStopShort    kind = "node-stop-short" // SIGSTOP for 0.5-2 s
	nodeStopLong     kind = "node-stop-long"  // SIGSTOP for 6-12 s
	redisKill        kind = "redis-kill"      // SIGKILL, restart empty 0.5-3 s later
	redisFlush       kind = "redis-flush"     // FLUSHALL
	redisStop        kind = "redis-stop"      // SIGSTOP for 1-8 s
	linkStall        kind = "link-stall"      // one node's bytes held 1-10 s, then delivered
	linkCut          kind = "link-cut"        // one node's connections closed, new ones refused, 2-10 s
	linkBlackhole    kind = "link-blackhole"  // one node's bytes thrown away 1-10 s
	clusterFailover  kind = "cluster-failover"
	slotMigrate      kind = "slot-migrate"
	sentinelFailover kind = "sentinel-failover"
)

// nodeKinds are the faults of a node, in every mode.
var nodeKinds = []kind{nodeKill, nodeTerm, nodeStopShort, nodeStopLong}

// modeKinds are the kinds that make sense in each mode. A Redis Cluster or
// Sentinel client learns servers' addresses from Redis and dials them
// directly, so the links (proxies) are in the single mode only.
var modeKinds = map[string][]kind{
	"single":   append([]kind{redisKill, redisFlush, redisStop, linkStall, linkCut, linkBlackhole}, nodeKinds...),
	"cluster":  append([]kind{clusterFailover, slotMigrate}, nodeKinds...),
	"sentinel": append([]kind{sentinelFailover}, nodeKinds...),
}

// durations are the ranges of each kind's length.
var durations = map[kind][2]time.Duration{
	nodeKill:      {500 * time.Millisecond, 3 * time.Second},
	nodeTerm:      {0, 2 * time.Second},
	nodeStopShort: {500 * time.Millisecond, 2 * time.Second},
	nodeStopLong:  {6 * time.Second, 12 * time.Second},
	redisKill:     {500 * time.Millisecond, 3 * time.Second},
	redisStop:     {time.Second, 8 * time.Second},
	linkStall:     {time.Second, 10 * time.Second},
	linkCut:       {2 * time.Second, 10 * time.Second},
	linkBlackhole: {time.Second, 10 * time.Second},
}

// touchesAll says whether a kind makes every node unhealthy (Redis itself
// fails or loses data) rather than one.
func (k kind) touchesAll() bool {
	switch k {
	case redisKill, redisFlush, redisStop:
		return true
	}
	return false
}

// touchesNone says whether a kind leaves every node healthy: a topology
// change the cluster must ride through without a false or a missed edge.
func (k kind) touchesNone() bool {
	switch k {
	case clusterFailover, slotMigrate, sentinelFailover:
		return true
	}
	return false
}

// fault is one fault of the schedule, and what happened when it ran.
type fault struct {
	kind     kind
	node     int           // the node (or the master, for a Cluster failover) it hits
	wait     time.Duration // planned wait after the previous fault healed (or the start)
	dur      time.Duration // planned length
	start    time.Time     // actual start
	end      time.Time     // actual heal
	note     string
	err      error
	finished bool
}

func (f *fault) String() string {
	s := string(f.kind)
	if !f.kind.touchesAll() && !f.kind.touchesNone() {
		s += " " + nodeName(f.node)
	}
	if f.note != "" {
		s += " (" + f.note + ")"
	}
	if f.err != nil {
		s += " ERROR: " + f.err.Error()
	}
	return s
}

// schedule draws the faults of a run from seed: rounds of the kinds in a
// random order each (so every kind comes about as often), each fault
// gap[0]-gap[1] after the previous one healed, the first at warmup, as many
// as the planned lengths fit in span.
func schedule(seed uint64, kinds []kind, nodes int, warmup, span time.Duration, gap [2]time.Duration) []*fault {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []*fault
	var bag []kind
	for t, wait := warmup, warmup; t < span; {
		if len(bag) == 0 {
			bag = shuffled(r, kinds)
		}
		k := bag[0]
		bag = bag[1:]
		d := durations[k]
		f := &fault{kind: k, node: r.IntN(nodes), wait: wait, dur: between(r, d[0], d[1])}
		out = append(out, f)
		wait = between(r, gap[0], gap[1])
		t += f.dur + wait
	}
	return out
}

func shuffled(r *rand.Rand, ks []kind) []kind {
	out := append([]kind(nil), ks...)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// inflict runs f on w, from now until it heals.
func (w *world) inflict(ctx context.Context, f *fault) error {
	hold := func() { sleep(ctx, f.dur) }
	switch f.kind {
	case nodeKill, nodeTerm:
		sig := syscall.SIGKILL
		if f.kind == nodeTerm {
			sig = syscall.SIGTERM
		}
		err := w.killNode(f.node, sig)
		hold()
		return errors.Join(err, w.startNode(f.node))
	case nodeStopShort, nodeStopLong:
		p := w.node(f.node)
		if p == nil {
			return fmt.Errorf("node %s is down", nodeName(f.node))
		}
		if err := p.Freeze(); err != nil {
			return err
		}
		hold()
		return p.Thaw()
	case redisKill:
		w.redis.Kill()
		hold()
		return w.restartRedis()
	case redisFlush:
		_, err := child.Do(ctx, w.redis.Addr, "FLUSHALL")
		return err
	case redisStop:
		if err := w.redis.Freeze(); err != nil {
			return err
		}
		hold()
		return w.redis.Thaw()
	case linkStall, linkCut, linkBlackhole:
		w.links[f.node].set(map[kind]linkMode{linkStall: stall, linkCut: cut, linkBlackhole: blackhole}[f.kind])
		hold()
		w.links[f.node].heal()
		return nil
	case clusterFailover:
		var err error
		f.note, err = w.clusterFailover(ctx, f.node)
		return err
	case slotMigrate:
		var err error
		f.note, err = w.migrateSlot(ctx, f.node)
		return err
	case sentinelFailover:
		var err error
		f.note, err = w.sentinelFailover(ctx)
		return err
	}
	return fmt.Errorf("unknown fault kind %q", f.kind)
}

// nemesis runs the schedule from start, one fault at a time, each its
// wait after the previous one healed: a failover lasts as long as it takes.
func (w *world) nemesis(ctx context.Context, start time.Time, faults []*fault) {
	for _, f := range faults {
		if !sleep(ctx, f.wait) {
			return
		}
		f.start = time.Now()
		w.logf("%6.2f s fault %s for %v", f.start.Sub(start).Seconds(), f, f.dur.Round(time.Millisecond))
		f.err = w.inflict(context.WithoutCancel(ctx), f)
		f.end, f.finished = time.Now(), true
		w.logf("%6.2f s healed %s", f.end.Sub(start).Seconds(), f)
	}
}
