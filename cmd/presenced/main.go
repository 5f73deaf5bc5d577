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
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/cluster"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
	"github.com/presenced/presenced/web"
	"github.com/presenced/presenced/webhook"
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
	apiKey     string
	grace      time.Duration
	lastSeen   time.Duration
	awayAfter  time.Duration
	typingTTL  time.Duration
	redis      string
	node       string

	memberList    int
	presenceLists int

	webhook       string
	webhookSecret string
	webhookQueue  int

	maxConnsPerUser int
	frameRate       float64
	frameBurst      int
	maxChannels     int
	byteRate        int
	queueBytes      int
	parkReaders     bool

	// addrFrom says where addr came from: "flag", "env", or the default
	// for the mode.
	addrFrom string
}

// envPrefix starts the environment variable of every flag: -member-list
// is also PRESENCED_MEMBER_LIST.
const envPrefix = "PRESENCED_"

// envName is the environment variable that can set the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Default listen addresses: loopback only in demo mode, where anyone who
// can reach the port may claim any user ID.
const (
	demoAddr = "127.0.0.1:8080"
	authAddr = ":8080"
)

// parseFlags reads the command line, then the environment for each flag
// the command line did not set (PRESENCED_ADDR for -addr, and so on), and
// checks the values. Secrets are best passed in the environment, so they do
// not appear in ps.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	var origins string
	fs := flag.NewFlagSet("presenced", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.addr, "addr", "", "listen address (default "+demoAddr+" in demo mode, loopback only; "+authAddr+" with a JWT secret)")
	fs.IntVar(&o.slots, "slots", 31, "ring slots, at least 2; the timeout is (slots-1)*tick")
	fs.DurationVar(&o.tick, "tick", time.Second, "ring step, at least 1ms")
	fs.Int64Var(&o.maxMessage, "max-message", transport.DefaultMaxMessage, "largest inbound WebSocket frame in bytes (larger: close 1009)")
	fs.StringVar(&origins, "origins", "", "comma-separated browser origins allowed besides the server's own host: \"*\" (any), https://host[:port] or host[:port]")
	fs.StringVar(&o.jwtSecret, "jwt-secret", "", "HS256 secret for client tokens; empty: demo mode, ?uid= is trusted")
	fs.StringVar(&o.apiKey, "api-key", "", "key of the server API (/api/presence, /api/channels, /api/publish, /api/send): requests need \"Authorization: apikey <key>\"")
	fs.DurationVar(&o.grace, "grace", 0, "delay before a user whose last connection closed is reported offline")
	fs.DurationVar(&o.lastSeen, "last-seen-ttl", presence.DefaultLastSeenTTL, "how long to remember when a user went offline (GET /api/presence/{uid}, status frames)")
	fs.DurationVar(&o.awayAfter, "away-after", 0, "mark a connection away after this long without an activity, chat, typing or join frame; 0: never")
	fs.StringVar(&o.webhook, "webhook", "", "URL to POST the presence edges this node produces to, in batches (http or https)")
	fs.StringVar(&o.webhookSecret, "webhook-secret", "", "key of each webhook POST's signatures: raw, or whsec_<base64> (Standard Webhooks' webhook-signature; the deprecated X-Presenced-Signature is keyed with the value as given)")
	fs.IntVar(&o.webhookQueue, "webhook-queue", webhook.DefaultQueue, "most webhook events waiting while the backend is down, at least 1 (past it the oldest are dropped and counted)")
	fs.DurationVar(&o.typingTTL, "typing-ttl", presence.DefaultTypingTTL, "how long a user stays typing in a channel after its last typing frame there, at least 1ms")
	fs.StringVar(&o.redis, "redis", "", "Redis URL to share presence between nodes (clustering)")
	fs.StringVar(&o.node, "node", "", "this node's name in the cluster (default: hostname-pid)")
	fs.IntVar(&o.memberList, "member-list", presence.DefaultMemberList, "most member IDs in a joined snapshot, at least 1 (its count is always exact)")
	fs.IntVar(&o.presenceLists, "presence-lists", presence.DefaultPresenceLists, "above this many members, at least 1, a channel's presence diffs carry the count only")
	fs.IntVar(&o.maxChannels, "max-channels", presence.DefaultMaxChannels, "most channels one connection may join, at least 1")
	fs.IntVar(&o.maxConnsPerUser, "max-conns-per-user", transport.DefaultConnsPerUser, "most WebSockets one user may hold on this node, at least 1 (one more: HTTP 429)")
	fs.Float64Var(&o.frameRate, "frame-rate", transport.DefaultFrameRate, "frames a second one connection may send on average (over: dropped, then close 1008)")
	fs.IntVar(&o.frameBurst, "frame-burst", transport.DefaultFrameBurst, "frames one connection may send at once")
	fs.IntVar(&o.byteRate, "byte-rate", transport.DefaultByteRate, "bytes a second one connection may send on average, in bursts of 16 seconds' worth")
	fs.IntVar(&o.queueBytes, "queue-bytes", transport.DefaultQueueBytes, "bytes queued for one connection before it is closed as a slow consumer (1008)")
	fs.BoolVar(&o.parkReaders, "park-readers", false, "keep a goroutine per connection blocked in read instead of polling idle sockets with epoll")
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " ($" + envName(f.Name) + ")" })
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: presenced [flags]\n\n"+
			"Serves presence over WebSocket and HTTP, with the demo page at / and metrics at /metrics.\n"+
			"Every flag can also be set by the environment variable named after it, %s<FLAG> in upper\n"+
			"case with - as _ (PRESENCED_ADDR, PRESENCED_MEMBER_LIST, ...); a flag on the command line\n"+
			"wins over its variable. Pass secrets in the environment: arguments show in ps.\n\nFlags:\n", envPrefix)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v := getenv(envName(f.Name))
		if err != nil || set[f.Name] || v == "" {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("invalid value %q for $%s: %v", v, envName(f.Name), e)
		}
		set[f.Name] = true
		if f.Name == "addr" {
			o.addrFrom = "$" + envName(f.Name)
		}
	})
	if err != nil {
		return o, err
	}
	switch {
	case o.addrFrom != "":
	case set["addr"]:
		o.addrFrom = "-addr"
	case o.jwtSecret == "":
		o.addr, o.addrFrom = demoAddr, "default in demo mode: loopback only"
	default:
		o.addr, o.addrFrom = authAddr, "default"
	}
	for _, s := range strings.Split(origins, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.origins = append(o.origins, s)
		}
	}
	return o, o.check()
}

// check reports the first value the server cannot run with.
func (o options) check() error {
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return fmt.Errorf("-addr %q: want host:port or :port", o.addr)
	}
	switch {
	case o.slots < 2:
		return fmt.Errorf("-slots %d: at least 2", o.slots)
	case o.tick < time.Millisecond:
		return fmt.Errorf("-tick %v: at least 1ms", o.tick)
	case o.maxMessage < 1:
		return fmt.Errorf("-max-message %d: at least 1 byte", o.maxMessage)
	case o.grace < 0:
		return fmt.Errorf("-grace %v: not negative", o.grace)
	case o.lastSeen < time.Millisecond:
		return fmt.Errorf("-last-seen-ttl %v: at least 1ms", o.lastSeen)
	case o.awayAfter < 0:
		return fmt.Errorf("-away-after %v: not negative", o.awayAfter)
	case o.webhookQueue < 1:
		return fmt.Errorf("-webhook-queue %d: at least 1", o.webhookQueue)
	case o.webhookSecret != "" && o.webhook == "":
		return errors.New("-webhook-secret without -webhook")
	case o.typingTTL < time.Millisecond:
		return fmt.Errorf("-typing-ttl %v: at least 1ms", o.typingTTL)
	case o.memberList < 1:
		return fmt.Errorf("-member-list %d: at least 1", o.memberList)
	case o.presenceLists < 1:
		return fmt.Errorf("-presence-lists %d: at least 1", o.presenceLists)
	case o.maxChannels < 1:
		return fmt.Errorf("-max-channels %d: at least 1", o.maxChannels)
	case o.maxConnsPerUser < 1:
		return fmt.Errorf("-max-conns-per-user %d: at least 1", o.maxConnsPerUser)
	case o.frameRate <= 0 || o.frameBurst < 1 || o.byteRate < 1:
		return fmt.Errorf("-frame-rate, -frame-burst and -byte-rate must be positive")
	case o.queueBytes < 64<<10:
		return fmt.Errorf("-queue-bytes %d: at least 64 KiB", o.queueBytes)
	}
	for _, s := range o.origins {
		if err := transport.CheckOrigin(s); err != nil {
			return fmt.Errorf("-origins: %q: %w", s, err)
		}
	}
	if o.webhook != "" {
		if _, err := webhook.New(webhook.Config{URL: o.webhook}); err != nil {
			return fmt.Errorf("-webhook: %w", err)
		}
		if _, err := webhook.New(webhook.Config{URL: o.webhook, Secret: o.webhookSecret}); err != nil {
			return fmt.Errorf("-webhook-secret: %w", err)
		}
	}
	return nil
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
		LastSeenTTL: o.lastSeen, Logger: log, Registerer: reg})
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	log.Info("sharing presence through redis", "node", e.Node())
	return e, func(ctx context.Context) error { return errors.Join(e.Close(ctx), rdb.Close()) }, nil
}

// loopback reports whether addr listens on the loopback interface only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// logAttrs are the settings in use, for the start-up line: every value
// filled in, and the secrets only as set or unset.
func (o options) logAttrs(addr string, timeout time.Duration) []any {
	mode, origins, redis, node, hook := "jwt", "same host only", "unset: presence in memory", o.node, "unset"
	if u, err := url.Parse(o.webhook); o.webhook != "" && err == nil {
		hook = u.Redacted()
	}
	if o.jwtSecret == "" {
		mode = "demo"
	}
	if len(o.origins) > 0 {
		origins = strings.Join(o.origins, ",")
	}
	if o.redis != "" {
		redis = o.redis
		if u, err := url.Parse(o.redis); err == nil {
			redis = u.Redacted()
		}
	}
	if node == "" {
		node = "hostname-pid"
		if o.redis == "" {
			node = "unused without -redis"
		}
	}
	return []any{"addr", addr, "addr_from", o.addrFrom, "mode", mode,
		"jwt_secret", setOrUnset(o.jwtSecret), "api_key", setOrUnset(o.apiKey),
		"slots", o.slots, "tick", o.tick, "timeout", timeout, "grace", o.grace,
		"max_message", o.maxMessage, "member_list", o.memberList, "presence_lists", o.presenceLists,
		"max_conns_per_user", o.maxConnsPerUser, "frame_rate", o.frameRate, "frame_burst", o.frameBurst,
		"byte_rate", o.byteRate, "queue_bytes", o.queueBytes,
		"origins", origins, "redis", redis, "node", node,
		"away_after", o.awayAfter, "webhook", hook, "webhook_secret", setOrUnset(o.webhookSecret)}
}

func setOrUnset(secret string) string {
	if secret == "" {
		return "unset"
	}
	return "set"
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
	auth := transport.DemoAuth()
	if o.jwtSecret != "" {
		auth = transport.JWTAuth([]byte(o.jwtSecret))
	} else {
		log.Warn("no -jwt-secret or PRESENCED_JWT_SECRET: demo mode, clients are trusted to name themselves with ?uid=")
		if !loopback(o.addr) {
			log.Warn("demo mode on " + o.addr + ", not loopback only: anyone who reaches it can act as any user")
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	engine, closeEngine, err := newEngine(o, log, reg)
	if err != nil {
		return err
	}
	var hook *webhook.Sender
	var onEdges func([]presence.Edge)
	if o.webhook != "" {
		hook, err = webhook.New(webhook.Config{URL: o.webhook, Secret: o.webhookSecret, Queue: o.webhookQueue,
			Logger: log, Registerer: reg})
		if err != nil {
			return errors.Join(fmt.Errorf("-webhook: %w", err), closeEngine(context.Background()))
		}
		onEdges = hook.AddEdges
	}
	hub, err := transport.New(transport.Config{
		Slots:       o.slots,
		Tick:        o.tick,
		Auth:        auth,
		APIKey:      o.apiKey,
		Origins:     o.origins,
		Grace:       o.grace,
		Engine:      engine,
		LastSeenTTL: o.lastSeen,
		AwayAfter:   o.awayAfter,
		OnEdges:     onEdges,
		TypingTTL:   o.typingTTL,
		MaxMessage:  o.maxMessage,
		Logger:      log,
		Registerer:  reg,

		MemberList:    o.memberList,
		PresenceLists: o.presenceLists,
		MaxChannels:   o.maxChannels,

		MaxConnsPerUser: o.maxConnsPerUser,
		FrameRate:       o.frameRate,
		FrameBurst:      o.frameBurst,
		ByteRate:        o.byteRate,
		QueueBytes:      o.queueBytes,
		ParkReaders:     o.parkReaders,
	})
	if err != nil {
		return errors.Join(err, closeEngine(context.Background()))
	}

	mux := http.NewServeMux()
	page := web.Handler()
	mux.Handle("/", page)
	mux.Handle("/presenced.js", hub.CORS(page))
	mux.Handle("/ws", hub)
	mux.Handle("/api/", hub)
	mux.Handle("/healthz", hub)
	mux.Handle("/readyz", hub)
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
	log.Info("listening", o.logAttrs(ln.Addr().String(), hub.Timeout())...)
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
