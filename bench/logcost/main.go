// Command logcost measures what a node's edges cost Redis: the commands and
// the CPU a second of a redis-server while N users stay online at rest, and
// while a storm of M users goes offline and comes back, with the webhook's
// delivery on (cluster.Config.Outbox, each produced edge reported
// delivered, as presenced -webhook does). It drives cluster.Engine directly,
// as presence.Node does with its users' changes: what a user's WebSocket
// costs Redis is its changes, and its keepalives never reach Redis.
//
// It builds against whichever checkout of presenced its module replaces, so
// bench/logcost.sh builds it at two commits and runs them interleaved.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/cluster"
	"github.com/presenced/presenced/presence"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:16391", "redis-server address (flushed first)")
	users := flag.Int("users", 100_000, "users online, one connection each, in rooms of 50")
	storm := flag.Int("storm", 10_000, "users that go offline and come back in the storm")
	rest := flag.Duration("rest", 30*time.Second, "how long to measure at rest")
	label := flag.String("label", "", "a name for this run's line")
	flag.Parse()
	if err := run(*addr, *users, *storm, *rest, *label); err != nil {
		log.Fatal(err)
	}
}

// relay counts the edges produced and reports them delivered in batches, as
// a webhook.Sender's OnDone does.
type relay struct {
	e        *cluster.Engine
	produced atomic.Int64
	mu       sync.Mutex
	ids      []string
}

func (r *relay) Receive(ev presence.Event) {
	if ev.Kind != presence.EventProduced {
		return
	}
	r.produced.Add(1)
	if ev.Edge.ID == "" {
		return
	}
	r.mu.Lock()
	r.ids = append(r.ids, ev.Edge.ID)
	r.mu.Unlock()
}

// deliver reports the edges heard so far delivered, every 50 ms.
func (r *relay) deliver(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		ids := r.ids
		r.ids = nil
		r.mu.Unlock()
		if len(ids) > 0 {
			if err := r.e.Delivered(ctx, ids); err != nil {
				log.Printf("delivered: %v", err)
			}
		}
	}
}

// stats is what INFO says of the server's work so far.
type stats struct {
	calls int64   // commands, those scripts call included
	evals int64   // script calls
	cpu   float64 // seconds, user and system
	mem   int64   // used_memory, bytes
}

func readStats(ctx context.Context, rdb *redis.Client) (stats, error) {
	var s stats
	info, err := rdb.Info(ctx, "commandstats", "cpu", "memory").Result()
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			n, _ := strconv.ParseInt(calls, 10, 64)
			s.calls += n
			if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
				s.evals += n
			}
		case name == "used_cpu_user" || name == "used_cpu_sys":
			f, _ := strconv.ParseFloat(rest, 64)
			s.cpu += f
		case name == "used_memory":
			s.mem, _ = strconv.ParseInt(rest, 10, 64)
		}
	}
	return s, nil
}

func run(addr string, users, storm int, rest time.Duration, label string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flush %s: %w", addr, err)
	}
	e, err := cluster.New(cluster.Config{Client: rdb, Node: "logcost", Timeout: 30 * time.Second, Outbox: true})
	if err != nil {
		return err
	}
	r := &relay{e: e}
	e.Attach(r)
	go func() { _ = e.Run(ctx) }()
	go r.deliver(ctx)

	uid := func(i int) string { return "u" + strconv.Itoa(i) }
	room := func(i int) string { return "room-" + strconv.Itoa(i/50) }
	settle := func(want int64, what string) (time.Duration, error) {
		start := time.Now()
		for r.produced.Load() < want {
			if time.Since(start) > 5*time.Minute {
				return 0, fmt.Errorf("%s: %d of %d edges after 5 minutes", what, r.produced.Load(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(start), nil
	}

	// The ramp: every user online and in its room (two edges each).
	for i := range users {
		e.Apply(presence.Change{Kind: presence.ChangeUser, UID: uid(i), N: 1})
		e.Apply(presence.Change{Kind: presence.ChangeMember, Channel: room(i), UID: uid(i), N: 1})
	}
	if _, err := settle(int64(2*users), "ramp"); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the last deliveries

	before, err := readStats(ctx, rdb)
	if err != nil {
		return err
	}
	time.Sleep(rest)
	after, err := readStats(ctx, rdb)
	if err != nil {
		return err
	}
	sec := rest.Seconds()
	fmt.Printf("%s at rest, %d users: %.1f commands/s (%.2f script calls/s), %.2f%% of a core, %d B of Redis memory per user\n",
		label, users, float64(after.calls-before.calls)/sec, float64(after.evals-before.evals)/sec,
		100*(after.cpu-before.cpu)/sec, after.mem/int64(users))

	// The storm: storm users leave and come back, as a node's users
	// reconnecting after a blip do (four edges each).
	base := r.produced.Load()
	before = after
	start := time.Now()
	for i := range storm {
		e.Apply(presence.Change{Kind: presence.ChangeMember, Channel: room(i), UID: uid(i), N: 0})
		e.Apply(presence.Change{Kind: presence.ChangeUser, UID: uid(i), N: 0})
	}
	for i := range storm {
		e.Apply(presence.Change{Kind: presence.ChangeUser, UID: uid(i), N: 1})
		e.Apply(presence.Change{Kind: presence.ChangeMember, Channel: room(i), UID: uid(i), N: 1})
	}
	if _, err := settle(base+int64(4*storm), "storm"); err != nil {
		return err
	}
	took := time.Since(start)
	time.Sleep(time.Second) // the last deliveries
	after, err = readStats(ctx, rdb)
	if err != nil {
		return err
	}
	fmt.Printf("%s storm of %d: %d commands (%.1f per edge, %d script calls), %.3f s of Redis CPU (%.1f µs per edge), settled in %v\n",
		label, storm, after.calls-before.calls, float64(after.calls-before.calls)/float64(4*storm), after.evals-before.evals,
		after.cpu-before.cpu, 1e6*(after.cpu-before.cpu)/float64(4*storm), took.Round(time.Millisecond))
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	return e.Close(cctx)
}
