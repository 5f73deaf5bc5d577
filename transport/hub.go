// Package transport serves presence over WebSocket and HTTP, on top of a
// presence.Node: every frame a client sends is a keepalive in a tracker ring
// that holds this process's sockets, and a socket silent for the timeout is
// closed. Clients join channels and watch users, and hear only of those: a
// snapshot on join, then at most one coalesced diff per channel and one
// status frame per tick.
//
// A Hub is an http.Handler for GET /ws and the HTTP API (/api/presence,
// /api/presence/{uid}, /api/channels/{channel}, POST /api/heartbeat,
// /api/ring, /healthz), so it can be mounted in an existing http.ServeMux;
// see the package example. Presence is kept by a presence.Engine: in memory
// by default, or shared between nodes.
//
// Close codes the Hub sends: 4408 "idle timeout" (silent past the timeout),
// 1001 on Shutdown, 1009 for a frame over Config.MaxMessage, and 1008 "slow
// consumer" to a client that does not read fast enough for its send queue.
package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/tracker"
)

// Close codes sent by the Hub, besides the standard 1001 and 1009.
const (
	// CloseIdleTimeout closes a connection silent past the timeout, with
	// reason "idle timeout".
	CloseIdleTimeout = 4408
	// CloseSlowConsumer closes a connection whose send queue is full, with
	// reason "slow consumer" (1008, policy violation).
	CloseSlowConsumer = websocket.ClosePolicyViolation
)

// Defaults used when a Config field is zero.
const (
	DefaultMaxMessage    = 4096
	DefaultSendQueue     = 256
	DefaultWriteTimeout  = 10 * time.Second
	DefaultCloseTimeout  = time.Second
	DefaultSocketBuffer  = 64 << 10
	DefaultPresenceLimit = 100
	MaxPresenceLimit     = 1000
)

// readBufferSize is each connection's read buffer: frames are small, and
// net/http's 4 KiB reader is released instead.
const readBufferSize = 1024

// Config configures a Hub. The zero value is a 31-slot ring stepping once a
// second (a 30 s timeout), in-memory presence and demo authentication.
type Config struct {
	Slots int           // ring size; 0 means 31
	Tick  time.Duration // ring step; 0 means 1 s. The timeout is (Slots-1)*Tick.

	// Auth identifies clients of /ws and /api/heartbeat. nil means DemoAuth,
	// which trusts ?uid=; New logs a warning then.
	Auth Authenticator
	// Origins lists browser origins allowed besides the request's own host:
	// "*", full origins ("https://app.example.com") or hosts
	// ("app.example.com:8443"). Other origins get HTTP 403.
	Origins []string

	// Grace delays a user's offline, and its leaving the channels its last
	// connection had joined, after that connection is gone, so a page reload
	// does not flap presence. It is rounded up to whole ticks.
	Grace time.Duration

	// Engine keeps presence; nil means presence.NewMemoryEngine(). The Hub
	// calls its Run until Shutdown; releasing a networked engine after that
	// is the caller's job.
	Engine presence.Engine

	MemberList    int // most member IDs in a joined snapshot; 0 means 100
	PresenceLists int // above this many members a channel's diffs carry the count only; 0 means 1,000

	MaxMessage   int64         // largest inbound frame in bytes, larger closes with 1009; 0 means 4096
	SendQueue    int           // frames queued per connection before it is closed as a slow consumer; 0 means 256
	WriteTimeout time.Duration // deadline of one outbound frame; 0 means 10 s
	CloseTimeout time.Duration // wait for the client's answer to a close frame; 0 means 1 s
	// SocketBuffer caps the kernel's send buffer of each WebSocket
	// (SO_SNDBUF), so a client that stops reading blocks the writer, and is
	// then closed, instead of parking megabytes in the kernel; 0 means
	// 64 KiB, -1 leaves the operating system's autotuning.
	SocketBuffer int

	Logger     *slog.Logger          // nil: silent
	Registerer prometheus.Registerer // nil: metrics are kept but not registered
}

// Hub serves WebSocket connections and the HTTP API. Create one with New and
// stop it with Shutdown.
type Hub struct {
	tracker  *tracker.Tracker[*conn]
	node     *presence.Node
	auth     Authenticator
	origins  *originPolicy
	upgrader websocket.Upgrader
	log      *slog.Logger
	m        *metrics
	mux      *http.ServeMux

	maxMessage   int64
	sendQueue    int
	writeTimeout time.Duration
	closeTimeout time.Duration
	socketBuffer int

	mu      sync.Mutex
	live    map[*conn]struct{} // upgraded WebSockets not yet finished
	closing bool
	readers sync.WaitGroup // one per live WebSocket

	cancel   context.CancelFunc
	bg       sync.WaitGroup
	shutOnce sync.Once
	shutDone chan struct{}
}

// New returns a running Hub for cfg: its ring steps and its engine delivers
// from now on, until Shutdown.
func New(cfg Config) (*Hub, error) { return newHub(cfg, false) }

// newHub is New; with manual set the ring steps only when a test calls
// tracker.Advance.
func newHub(cfg Config, manual bool) (*Hub, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxMessage < 0 || cfg.SendQueue < 0 || cfg.WriteTimeout < 0 ||
		cfg.CloseTimeout < 0 || cfg.SocketBuffer < -1 {
		return nil, errors.New("transport: Config: MaxMessage, SendQueue, WriteTimeout and CloseTimeout must not be negative, SocketBuffer not below -1")
	}
	h := &Hub{
		auth:         cfg.Auth,
		origins:      newOriginPolicy(cfg.Origins),
		log:          log,
		maxMessage:   orDefault(cfg.MaxMessage, DefaultMaxMessage),
		sendQueue:    orDefault(cfg.SendQueue, DefaultSendQueue),
		writeTimeout: orDefault(cfg.WriteTimeout, DefaultWriteTimeout),
		closeTimeout: orDefault(cfg.CloseTimeout, DefaultCloseTimeout),
		socketBuffer: orDefault(cfg.SocketBuffer, DefaultSocketBuffer),
		live:         make(map[*conn]struct{}),
		shutDone:     make(chan struct{}),
	}
	if h.auth == nil {
		h.auth = DemoAuth()
		log.Warn("transport: no authenticator configured: trusting ?uid= (demo mode); anyone can claim any user ID")
	}
	slots, tick := cfg.Slots, cfg.Tick
	if slots == 0 {
		slots = tracker.DefaultSlots
	}
	if tick == 0 {
		tick = tracker.DefaultTick
	}
	node, err := presence.New(presence.Config{
		Engine: cfg.Engine, Slots: slots, Tick: tick, Grace: cfg.Grace,
		MemberList: cfg.MemberList, PresenceLists: cfg.PresenceLists, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	h.node = node
	tr, err := tracker.New(tracker.Config[*conn]{
		Slots:     slots,
		Tick:      tick,
		IdleAfter: time.Duration(slots-1) * tick / 2,
		OnIdle:    h.onIdle,
		OnOffline: h.onOffline,
		OnStep:    h.onStep,
	})
	if err != nil {
		return nil, fmt.Errorf("transport: ring: %w", err)
	}
	h.tracker = tr
	m, err := newMetrics(cfg.Registerer, node)
	if err != nil {
		return nil, err
	}
	h.m = m
	h.upgrader = websocket.Upgrader{
		// Frames are small: a 1 KiB read buffer, not net/http's 4 KiB one;
		// write buffers come from a pool, so an idle connection holds none.
		ReadBufferSize:  readBufferSize,
		WriteBufferPool: &sync.Pool{},
		CheckOrigin:     h.origins.allow,
	}
	h.routes()

	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		node.Run(ctx)
	}()
	if !manual {
		h.bg.Add(1)
		go func() {
			defer h.bg.Done()
			h.tracker.Run(ctx)
		}()
	}
	return h, nil
}

func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Timeout is how long a connection may stay silent: (Slots-1)*Tick.
func (h *Hub) Timeout() time.Duration { return h.tracker.Timeout() }

// onStep follows each step of the ring, after the step's idle closes: the
// node's leases and grace periods step too, and the tick's coalesced
// presence goes out.
func (h *Hub) onStep(took time.Duration) {
	h.m.steps.Observe(took.Seconds())
	h.node.Tick()
}

// onIdle probes a silent WebSocket with a ping, which browsers answer even
// from a background tab.
func (h *Hub) onIdle(c *conn) {
	c.enqueue(nil) // nil is the ping item
}

// onOffline closes a socket that timed out, unless a frame touched it again
// between the step and this callback.
func (h *Hub) onOffline(c *conn) {
	if !h.tracker.Online(c) {
		c.closeWith(CloseIdleTimeout, "idle timeout", reasonIdle)
	}
}

// heartbeat keeps uid online, a member of channels, for one timeout, as a
// connection of its own.
func (h *Hub) heartbeat(uid string, channels []string) error {
	if err := h.node.Heartbeat(uid, channels); err != nil {
		return errShuttingDown
	}
	h.m.kaHeartbeat.Inc()
	return nil
}

var errShuttingDown = errors.New("transport: shutting down")

// Shutdown closes every WebSocket with 1001, refuses new ones with 503,
// reports this node's users offline and waits until every connection is
// gone or ctx is done; then it closes the remaining sockets and stops the
// ring and the engine. It returns ctx.Err() if ctx ended first. Calls after
// the first wait for the first to finish.
func (h *Hub) Shutdown(ctx context.Context) error {
	err := errShuttingDown
	h.shutOnce.Do(func() {
		err = h.shutdown(ctx)
		close(h.shutDone)
	})
	if err == errShuttingDown {
		select {
		case <-h.shutDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (h *Hub) shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	h.node.Shutdown()
	live := make([]*conn, 0, len(h.live))
	for c := range h.live {
		live = append(live, c)
	}
	h.mu.Unlock()

	for _, c := range live {
		c.closeWith(websocket.CloseGoingAway, "server shutdown", reasonShutdown)
	}
	drained := make(chan struct{})
	go func() {
		h.readers.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = fmt.Errorf("transport: shutdown: %w", ctx.Err())
		for _, c := range live {
			c.ws.NetConn().Close() // wakes its reader, which finishes
		}
		<-drained
	}
	h.cancel()
	h.bg.Wait()
	h.tracker.Close()
	h.node.Close()
	return err
}
