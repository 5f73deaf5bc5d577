// Command faults is the randomized fault test: three presenced nodes on
// Redis, each through a link the nemesis can stall, cut or blackhole; real
// WebSocket clients that log when they were connected; a webhook receiver
// that verifies signatures and refuses some POSTs; a second backend that
// keeps its state from the log of edges alone, down at drawn times; a
// nemesis that draws faults from a seed; and a checker of the webhook's
// edges, the replayed log and the nodes' API against the clients' truth.
//
//	cd bench && go run ./faults -seed 1 -minutes 10 -clients 300
//	cd bench && go run ./faults -schedule redis-stop:6s*3   # a fixed schedule
//	cd bench && go run ./faults -kill-after-connects 100 -seed 1
//
// It builds cmd/presenced, runs the schedule, heals, settles, checks, and
// prints the counts; a failing run prints its seed and each anomaly with a
// timeline of the faults around it, and exits 1. Load stays on 127.0.0.1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	var (
		cfg     config
		minutes float64
		kinds   string
		plan    string
		killN   int
		gap     time.Duration
	)
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the schedule and of the clients' choices")
	flag.Float64Var(&minutes, "minutes", 10, "length of the schedule")
	flag.IntVar(&cfg.clients, "clients", 300, "users: half stable, a tenth with a tab on each of two nodes, the rest churning")
	flag.StringVar(&cfg.mode, "mode", "single", "topology: single (one redis-server, links the nemesis breaks), cluster (Redis Cluster) or sentinel")
	flag.StringVar(&kinds, "kinds", "", "comma-separated fault kinds to draw; empty: every kind of the mode")
	flag.StringVar(&plan, "schedule", "", "a fixed schedule instead of drawn faults: kind[@node][:duration][*count],... such as redis-stop:6s*3 (-minutes and -kinds do not apply)")
	flag.IntVar(&killN, "kill-after-connects", 0, "instead of a schedule: this many users connect to node A, A is SIGKILLed 0-50 ms (drawn) after the last welcome, and each user's online and offline must reach the webhook once (single mode; -schedule, -kinds and -minutes do not apply)")
	flag.DurationVar(&gap, "gap", 10*time.Second, "least time between a fault's heal and the next; the most is three times it")
	flag.BoolVar(&cfg.replay, "replay", true, "run the second backend, which keeps its state from the log of edges alone (GET /api/events, a snapshot on 410), down for drawn stretches of 30 s to 3 min, and check it")
	flag.IntVar(&cfg.eventsMax, "events-max", 6000, "-events-max of the nodes (most edges the log keeps): at 300 clients about 80 s of edges, so that the replayer's long downs outlive the log and take a snapshot, its short ones replay; 0: the server's default")
	flag.StringVar(&cfg.bin, "bin", "", "presenced binary; empty: build ./cmd/presenced")
	flag.StringVar(&cfg.redis, "redis-server", "redis-server", "redis-server binary")
	flag.StringVar(&cfg.redisCLI, "redis-cli", "redis-cli", "redis-cli binary (cluster mode)")
	flag.StringVar(&cfg.dir, "logs", "", "directory for the processes' logs; empty: a new temporary directory")
	flag.Parse()

	cfg.span = time.Duration(minutes * float64(time.Minute))
	cfg.gap = [2]time.Duration{gap, 3 * gap}
	cfg.lifetime = [2]time.Duration{time.Second, 20 * time.Second}
	cfg.logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "faults %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	cfg.kinds = modeKinds[cfg.mode]
	if kinds != "" {
		cfg.kinds = nil
		for k := range strings.SplitSeq(kinds, ",") {
			cfg.kinds = append(cfg.kinds, kind(strings.TrimSpace(k)))
		}
	}
	if plan != "" {
		if kinds != "" {
			fmt.Fprintln(os.Stderr, "faults: -schedule and -kinds: give one")
			os.Exit(2)
		}
		var err error
		if cfg.plan, err = parsePlan(plan, nodes); err != nil {
			fmt.Fprintf(os.Stderr, "faults: -schedule: %v\n", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if killN > 0 {
		os.Exit(runKill(ctx, &cfg, killN))
	}
	var res *result
	err := setUp(ctx, &cfg)
	if err == nil {
		res, err = run(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "faults: seed %d: %v\n", cfg.seed, err)
		os.Exit(2)
	}
	fmt.Print(res.history.report(cfg.seed, cfg.mode))
	if len(res.anomalies) > 0 {
		os.Exit(1)
	}
}

// setUp fills in the log directory and the binary, building it if unset.
func setUp(ctx context.Context, cfg *config) error {
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "faults.")
		if err != nil {
			return err
		}
		cfg.dir = d
	}
	for _, p := range []*string{&cfg.redis, &cfg.redisCLI} {
		path, err := exec.LookPath(*p)
		if err != nil {
			return err
		}
		*p = path
	}
	if cfg.bin == "" {
		bin, err := buildPresenced(ctx, cfg.dir)
		if err != nil {
			return err
		}
		cfg.bin = bin
	}
	return nil
}

// runKill runs the kill right after connects and prints what it found;
// it returns the exit code.
func runKill(ctx context.Context, cfg *config, users int) int {
	err := setUp(ctx, cfg)
	var k *killed
	if err == nil {
		k, err = killAfterConnects(ctx, *cfg, users)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "faults: seed %d: %v\n", cfg.seed, err)
		return 2
	}
	fmt.Print(k)
	if len(k.problems) > 0 {
		return 1
	}
	return 0
}
