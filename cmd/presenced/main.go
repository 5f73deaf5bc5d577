// Command presenced serves presence over WebSocket and HTTP, with the demo
// page at "/" and Prometheus metrics at /metrics.
//
//	go run ./cmd/presenced            # demo mode on 127.0.0.1:8080, then open http://localhost:8080
//	PRESENCED_JWT_SECRET=... PRESENCED_API_KEY=... presenced -addr :9000 -origins https://app.example.com
//
// Every flag can also come from the environment: -member-list from
// PRESENCED_MEMBER_LIST, and so on; the command line wins. Without a JWT
// secret (demo mode) the server listens on loopback only unless -addr says
// otherwise.
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
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/cluster"
	"github.com/presenced/presenced/docs"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
	"github.com/presenced/presenced/web"
	"github.com/presenced/presenced/webhook"
)

// shutdownTimeout bounds the graceful part of a shutdown.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// newEngine picks where presence lives: this process, or Redis with -redis.
// The returned func releases the engine after the Hub has shut down: with
// Redis it drops this node's leases, so its users go offline at once.
func newEngine(o options, log *slog.Logger, reg prometheus.Registerer) (presence.Engine, func(context.Context) error, error) {
	if o.redis == "" {
		e, err := presence.NewMemoryEngineWith(o.events)
		return e, func(context.Context) error { return nil }, err
	}
	rdb, err := cluster.NewClient(o.redis)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis: %w", err)
	}
	// With a webhook, edges wait in Redis until it took them, so a node
	// that dies first leaves them to the node that claims it.
	e, err := cluster.New(cluster.Config{Client: rdb, Node: o.node, Timeout: time.Duration(o.hub.Slots-1) * o.hub.Tick,
		LastSeenTTL: o.hub.LastSeenTTL, Outbox: o.webhook.URL != "", Log: o.events, Logger: log, Registerer: reg})
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	log.Info("sharing presence through redis", "node", e.Node())
	return e, func(ctx context.Context) error { return errors.Join(e.Close(ctx), rdb.Close()) }, nil
}

// run serves until ctx is done and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "presenced:", err)
		fmt.Fprintln(stderr, "presenced -h lists the flags, their variables and the form of each value.")
		return 2
	}
	if o.version {
		fmt.Fprintln(stdout, version())
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	for _, w := range strayVariables(os.Environ(), getenv) {
		log.Warn(w)
	}
	if o.redis != "" {
		// Process-wide, so set here in main, never by a library.
		redis.SetLogger(cluster.RedisLogger(log))
	}
	if err := serve(ctx, o, log); err != nil {
		log.Error("presenced: " + err.Error())
		return 1
	}
	return 0
}

func serve(ctx context.Context, o options, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	engine, closeEngine, err := newEngine(o, log, reg)
	if err != nil {
		return err
	}
	var hook *webhook.Sender
	var onEdges func([]presence.Edge)
	if o.webhook.URL != "" {
		wc := o.webhook
		wc.Logger, wc.Registerer = log, reg
		if c, ok := engine.(*cluster.Engine); ok {
			wc.OnDone = func(ids []string) {
				if err := c.Delivered(context.Background(), ids); err != nil {
					log.Warn("webhook: could not tell redis that events were delivered; a node that claims this one may send them again", "events", len(ids), "err", err)
				}
			}
		}
		hook, err = webhook.New(wc)
		if err != nil {
			return errors.Join(fmt.Errorf("-webhook: %w", err), closeEngine(context.Background()))
		}
		onEdges = hook.AddEdges
	}
	if limit, err := transport.DescriptorLimit(); err == nil && (o.hub.MaxConns == 0 || o.hub.MaxConns > transport.MaxConnsWithin(limit)) {
		log.Warn("-max-conns leaves too few file descriptors: at the descriptor limit, health checks, the API and Redis fail with the upgrades",
			"max_conns", o.hub.MaxConns, "descriptor_limit", limit, "most_that_leaves_enough", transport.MaxConnsWithin(limit))
	}
	cfg := o.hub
	cfg.Engine, cfg.OnEdges, cfg.Logger, cfg.Registerer = engine, onEdges, log, reg
	if o.demo() {
		cfg.Auth = transport.DemoAuth() // the Hub warns of it; the listening line says where it listens
	} else if o.jwtSecret != "" {
		cfg.JWT.Secret = []byte(o.jwtSecret)
	}
	hub, err := transport.New(cfg)
	if err != nil {
		return errors.Join(err, closeEngine(context.Background()))
	}

	// Every path asks the Hub what it needs (docs/protocol.md, Who may
	// ask what): the Hub's own, and these through Public and RequireKey.
	mux := http.NewServeMux()
	page := web.Handler()
	mux.Handle("/", hub.Public(page))
	mux.Handle("/presenced.js", hub.Public(hub.CORS(page)))
	mux.Handle("/ws", hub)
	mux.Handle("/sse", hub)
	mux.Handle("/sse/", hub)
	mux.Handle("/api/", hub)
	mux.Handle("/healthz", hub)
	mux.Handle("/readyz", hub)
	// The counts include invisible users: they need what the server API needs.
	mux.Handle("GET /metrics", hub.RequireKey(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	// The machine-readable descriptions of the API and the frames.
	mux.Handle("/openapi.yaml", hub.Public(docs.Handler()))
	mux.Handle("/schema/", hub.Public(docs.Handler()))
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
	attrs := o.logAttrs(ln.Addr().String(), hub.Timeout())
	if o.demo() {
		// Right after addr: the demo page is what a first run is for.
		attrs = slices.Insert(attrs, 2, any("url"), any(pageURL(ln.Addr())))
	}
	log.Info("listening", attrs...)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	hookCtx, stopHook := context.WithCancel(context.Background())
	hookDone := make(chan struct{})
	go func() {
		defer close(hookDone)
		if hook != nil {
			_ = hook.Run(hookCtx) // returns when stopped
		}
	}()

	select {
	case err = <-served:
		err = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		log.Info("shutting down")
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = errors.Join(err,
		hub.Shutdown(sctx), // clients get 1001
		srv.Shutdown(sctx),
		closeEngine(sctx))
	if hook != nil {
		// The users who went offline as the server closed their connections
		// are the backend's last edges from this node: deliver them first.
		if derr := hook.Drain(sctx); derr != nil {
			log.Warn("webhook: events not delivered before shutdown", "err", derr)
		}
	}
	stopHook()
	<-hookDone
	return err
}

// pageURL is the address of the demo page served on addr: on every
// interface, the browser's is localhost.
func pageURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// version is the line -version prints: the module's version (a pseudo-version
// or "(devel)" with the commit, for a build from a checkout) and the
// protocol's.
func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		if v == "" || v == "(devel)" {
			v = "(devel)"
			var rev, dirty string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value[:min(12, len(s.Value))]
				case "vcs.modified":
					if s.Value == "true" {
						dirty = "+dirty"
					}
				}
			}
			if rev != "" {
				v += " " + rev + dirty
			}
		}
	}
	return "presenced " + v + " protocol " + protocol.Version
}
