// Command loadgen opens many real WebSocket clients against presenced (or any
// server speaking its welcome/ping/4408 subset), silences some of them after
// the ramp and reports how the server dealt with them as one JSON line.
//
//	loadgen -url ws://127.0.0.1:8080/ws -conns 5000 -ramp 10s -silent 500 -duration 60s -room 50
//
// With -transport sse the clients are Server-Sent Events streams instead:
// GET -url (http://127.0.0.1:8080/sse) and, for each ping, POST -url/{session};
// there are no server pings, so -every must be shorter than the timeout.
//
// Each client is its own user (lg0, lg1, ...) unless -users says otherwise.
// With -room N client i joins channel room-<i/N> at connect; -big-channel adds
// one large channel. Clients read every frame the server sends and count
// them by "type" (frames_by_type, frames_per_client in the summary), so the
// server's fan-out can be measured from the receiving end.
//
// Clients are split over worker processes (re-executions of this binary) so
// no process nears the open-file limit, and over source addresses
// 127.0.0.2.. so no address runs out of ephemeral ports. Progress goes to
// stderr once a second. The exit code is 1 when a live client was closed or a
// silent one was not closed with 4408, 2 on a usage or start error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/presenced/presenced/cmd/loadgen/internal/loadgen"
)

const workerFlag = "worker"

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var (
		cfg       loadgen.Config
		src       string
		worker    bool
		verbosity string
	)
	fs.StringVar(&cfg.URL, "url", "ws://127.0.0.1:8080/ws", "WebSocket URL (sse: the stream's http:// URL) on a loopback address (uid is added per client)")
	fs.StringVar(&cfg.Transport, "transport", loadgen.TransportWS, "ws: WebSocket clients; sse: Server-Sent Events streams, pings POSTed")
	fs.IntVar(&cfg.Conns, "conns", 1000, "clients to open")
	fs.DurationVar(&cfg.Ramp, "ramp", 10*time.Second, "time over which the clients are opened")
	fs.DurationVar(&cfg.Every, "every", 0, "send {\"type\":\"ping\"} from each client this often (0: only answer server pings)")
	fs.IntVar(&cfg.Silent, "silent", 0, "clients that stop answering and sending when the ramp ends")
	fs.DurationVar(&cfg.Duration, "duration", time.Minute, "whole run, ramp included")
	fs.IntVar(&cfg.Workers, "workers", 0, "worker processes (0: one per -per-worker clients)")
	fs.IntVar(&cfg.PerWorker, "per-worker", 10000, "clients per worker process when -workers is 0")
	fs.IntVar(&cfg.Sources, "sources", 0, "source addresses to spread clients over (0: one per 8000 clients)")
	fs.StringVar(&src, "source-first", "127.0.0.2", "first source address")
	fs.StringVar(&cfg.UIDPrefix, "uid-prefix", "lg", "user IDs are this prefix and a number")
	fs.IntVar(&cfg.Users, "users", 0, "distinct user IDs, client i being user i mod -users (0: one user per client)")
	fs.IntVar(&cfg.Room, "room", 0, "put client i in channel room-<i/N> at connect (?channels=), so rooms hold N clients (0: no rooms)")
	fs.StringVar(&cfg.BigChannel, "big-channel", "", "also put every -big-every-th client (i mod K == 0) in this one channel at connect")
	fs.IntVar(&cfg.BigEvery, "big-every", 0, "with -big-channel: K (0 or 1: every client), so the channel holds about conns/K members")
	fs.IntVar(&cfg.DialLimit, "dial-limit", 64, "concurrent dials per worker")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "sample this local process's CPU and RSS at the start and end of the hold")
	fs.StringVar(&verbosity, "log", "warn", "log level: debug, info, warn, error")
	fs.BoolVar(&worker, workerFlag, false, "internal: run as a worker, reading its job from stdin")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(verbosity)); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: -log:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if worker {
		job, err := loadgen.ReadJob(os.Stdin)
		if err != nil {
			log.Error("worker", "err", err)
			return 2
		}
		if err := loadgen.RunWorker(ctx, job.Spec, job.Workers, os.Stdout, log.With("worker", job.Spec.Worker)); err != nil {
			log.Error("worker", "err", err)
			return 1
		}
		return 0
	}

	first, err := netip.ParseAddr(src)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: -source-first:", err)
		return 2
	}
	cfg.SourceFirst = first
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: find own binary:", err)
		return 2
	}
	co := &loadgen.Coordinator{
		Launch:   loadgen.ExecLauncher(self, []string{"-" + workerFlag, "-log", verbosity}, nil, os.Stderr),
		Progress: os.Stderr,
		Log:      log,
	}
	sum, err := co.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return 2
	}
	if err := json.NewEncoder(os.Stdout).Encode(sum); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: write summary:", err)
		return 2
	}
	if !sum.OK() {
		fmt.Fprintf(os.Stderr, "loadgen: FAIL: false_closed=%d silent=%d silent_closed=%d worker_errors=%d\n",
			sum.FalseClosed, sum.Silent, sum.SilentClosed, len(sum.WorkerErrors))
		return 1
	}
	return 0
}
