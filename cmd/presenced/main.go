// Command presenced serves presence over WebSocket and HTTP, with the demo
// page at "/" and Prometheus metrics at /metrics.
//
//	go run ./cmd/presenced            # demo mode on :8080, then open http://localhost:8080
//	PRESENCED_JWT_SECRET=... presenced -addr :9000 -origins https://app.example.com
//
// SIGINT or SIGTERM closes every WebSocket with 1001 and then stops the
// HTTP server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/presenced/presenced/cluster"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
	"github.com/presenced/presenced/web"
)

// shutdownTimeout bounds the graceful part of a shutdown.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stderr))
}

type options struct {
	addr       string
	slots      int
	tick       time.Duration
	maxMessage int64
	origins    []string
	jwtSecret  string
	grace      time.Duration
	redis      string
	node       string

	memberList    int
	presenceLists int
}

// parseFlags reads the command line; the JWT secret may also come from
// PRESENCED_JWT_SECRET (the flag wins), so it need not appear in ps.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	var origins string
	fs := flag.NewFlagSet("presenced", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.addr, "addr", ":8080", "listen address")
	fs.IntVar(&o.slots, "slots", 31, "ring slots; the timeout is (slots-1)*tick")
	fs.DurationVar(&o.tick, "tick", time.Second, "ring step")
	fs.Int64Var(&o.maxMessage, "max-message", transport.DefaultMaxMessage, "largest inbound WebSocket frame in bytes (larger: close 1009)")
	fs.StringVar(&origins, "origins", "", "comma-separated browser origins allowed besides the server's own host (\"*\" for any)")
	fs.StringVar(&o.jwtSecret, "jwt-secret", "", "HS256 secret for client tokens (default $PRESENCED_JWT_SECRET); empty: demo mode, ?uid= is trusted")
	fs.DurationVar(&o.grace, "grace", 0, "delay before a user whose last connection closed is reported offline")
	fs.StringVar(&o.redis, "redis", "", "Redis URL to share presence between nodes (clustering)")
	fs.StringVar(&o.node, "node", "", "this node's name in the cluster (default: hostname-pid)")
	fs.IntVar(&o.memberList, "member-list", presence.DefaultMemberList, "most member IDs in a joined snapshot (its count is always exact)")
	fs.IntVar(&o.presenceLists, "presence-lists", presence.DefaultPresenceLists, "above this many members a channel's presence diffs carry the count only")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.jwtSecret == "" {
		o.jwtSecret = getenv("PRESENCED_JWT_SECRET")
	}
	for _, s := range strings.Split(origins, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.origins = append(o.origins, s)
		}
	}
	return o, nil
}

// newEngine picks where presence lives: this process, or Redis with -redis.
// The returned func releases the engine after the Hub has shut down: with
// Redis it drops this node's leases, so its users go offline at once.
func newEngine(o options, log *slog.Logger, reg prometheus.Registerer) (presence.Engine, func(context.Context) error, error) {
	if o.redis == "" {
		return presence.NewMemoryEngine(), func(context.Context) error { return nil }, nil
	}
	rdb, err := cluster.NewClient(o.redis)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis: %w", err)
	}
	e, err := cluster.New(cluster.Config{Client: rdb, Node: o.node, Timeout: time.Duration(o.slots-1) * o.tick,
		Logger: log, Registerer: reg})
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	log.Info("sharing presence through redis", "node", e.Node())
	return e, func(ctx context.Context) error { return errors.Join(e.Close(ctx), rdb.Close()) }, nil
}

// run serves until ctx is done and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	o, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "presenced:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(ctx, o, log); err != nil {
		log.Error("presenced: " + err.Error())
		return 1
	}
	return 0
}

func serve(ctx context.Context, o options, log *slog.Logger) error {
	auth := transport.DemoAuth()
	if o.jwtSecret != "" {
		auth = transport.JWTAuth([]byte(o.jwtSecret))
	} else {
		log.Warn("no -jwt-secret or PRESENCED_JWT_SECRET: demo mode, clients are trusted to name themselves with ?uid=")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	engine, closeEngine, err := newEngine(o, log, reg)
	if err != nil {
		return err
	}
	hub, err := transport.New(transport.Config{
		Slots:      o.slots,
		Tick:       o.tick,
		Auth:       auth,
		Origins:    o.origins,
		Grace:      o.grace,
		Engine:     engine,
		MaxMessage: o.maxMessage,
		Logger:     log,
		Registerer: reg,

		MemberList:    o.memberList,
		PresenceLists: o.presenceLists,
	})
	if err != nil {
		return errors.Join(err, closeEngine(context.Background()))
	}

	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	mux.Handle("/ws", hub)
	mux.Handle("/api/", hub)
	mux.Handle("/healthz", hub)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Deadlines stop slow or stalled clients from holding connections; a
	// WebSocket is exempt once upgraded (net/http clears them on hijack).
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		return errors.Join(fmt.Errorf("listen: %w", err), hub.Shutdown(sctx), closeEngine(sctx))
	}
	log.Info("listening", "addr", ln.Addr().String(), "timeout", hub.Timeout(), "slots", o.slots, "tick", o.tick)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err = <-served:
		err = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		log.Info("shutting down")
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return errors.Join(err,
		hub.Shutdown(sctx), // clients get 1001
		srv.Shutdown(sctx),
		closeEngine(sctx))
}
