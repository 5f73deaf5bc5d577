// Package transport serves presence over WebSocket and HTTP: every frame a
// client sends is a keepalive in a tracker ring, a user is online while at
// least one of its connections (tabs, devices, HTTP heartbeats) is live, and
// presence changes and chat are relayed to every connection.
//
// A Hub is an http.Handler for GET /ws and the HTTP API (/api/presence,
// /api/presence/{uid}, POST /api/heartbeat, /api/ring, /healthz), so it can
// be mounted in an existing http.ServeMux; see the package example. Presence
// is kept by an Engine: in memory by default, or shared between nodes.
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
	DefaultWelcomeLimit  = 100
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

	// Grace delays a user's offline after its last connection is gone, so a
	// page reload does not flap presence. It is rounded up to whole ticks.
	Grace time.Duration

	// Engine keeps presence; nil means NewMemoryEngine(). The Hub calls its
	// Run until Shutdown; releasing a networked engine after that is the
	// caller's job.
	Engine Engine

	MaxMessage   int64         // largest inbound frame in bytes, larger closes with 1009; 0 means 4096
	SendQueue    int           // frames queued per connection before it is closed as a slow consumer; 0 means 256
	WriteTimeout time.Duration // deadline of one outbound frame; 0 means 10 s
	CloseTimeout time.Duration // wait for the client's answer to a close frame; 0 means 1 s
	WelcomeLimit int           // most user IDs listed in the welcome frame; 0 means 100
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
	engine   Engine
	auth     Authenticator
	origins  *originPolicy
	upgrader websocket.Upgrader
	log      *slog.Logger
	m        *metrics
	mux      *http.ServeMux

	grace        time.Duration
	maxMessage   int64
	sendQueue    int
	writeTimeout time.Duration
	closeTimeout time.Duration
	welcomeLimit int
	socketBuffer int

	mu         sync.Mutex
	users      map[string]*userState
	heartbeats map[string]*conn
	live       map[*conn]struct{} // upgraded WebSockets not yet finished
	closing    bool
	readers    sync.WaitGroup // one per live WebSocket

	bmu   sync.RWMutex
	conns map[*conn]struct{} // WebSockets that receive broadcasts

	cancel   context.CancelFunc
	bg       sync.WaitGroup
	shutOnce sync.Once
	shutDone chan struct{}
}

// userState counts the local connections of one user. reported is the count
// last given to Engine.SetLocal; it stays above 0 during a grace period.
type userState struct {
	conns    int
	reported int
	grace    *conn // pending grace key, or nil
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
	if cfg.Grace < 0 || cfg.MaxMessage < 0 || cfg.SendQueue < 0 || cfg.WriteTimeout < 0 ||
		cfg.CloseTimeout < 0 || cfg.WelcomeLimit < 0 || cfg.SocketBuffer < -1 {
		return nil, errors.New("transport: Config: Grace, MaxMessage, SendQueue, WriteTimeout, CloseTimeout and WelcomeLimit must not be negative, SocketBuffer not below -1")
	}
	h := &Hub{
		engine:       cfg.Engine,
		auth:         cfg.Auth,
		origins:      newOriginPolicy(cfg.Origins),
		log:          log,
		grace:        cfg.Grace,
		maxMessage:   orDefault(cfg.MaxMessage, DefaultMaxMessage),
		sendQueue:    orDefault(cfg.SendQueue, DefaultSendQueue),
		writeTimeout: orDefault(cfg.WriteTimeout, DefaultWriteTimeout),
		closeTimeout: orDefault(cfg.CloseTimeout, DefaultCloseTimeout),
		welcomeLimit: orDefault(cfg.WelcomeLimit, DefaultWelcomeLimit),
		socketBuffer: orDefault(cfg.SocketBuffer, DefaultSocketBuffer),
		users:        make(map[string]*userState),
		heartbeats:   make(map[string]*conn),
		live:         make(map[*conn]struct{}),
		conns:        make(map[*conn]struct{}),
		shutDone:     make(chan struct{}),
	}
	if h.engine == nil {
		h.engine = NewMemoryEngine()
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
	tr, err := tracker.New(tracker.Config[*conn]{
		Slots:     slots,
		Tick:      tick,
		IdleAfter: time.Duration(slots-1) * tick / 2,
		OnIdle:    h.onIdle,
		OnOffline: h.onOffline,
		OnStep:    func(took time.Duration) { h.m.steps.Observe(took.Seconds()) },
	})
	if err != nil {
		return nil, fmt.Errorf("transport: ring: %w", err)
	}
	h.tracker = tr
	m, err := newMetrics(cfg.Registerer)
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
	go h.runEngine(ctx)
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

// runEngine keeps the engine's Run going; a networked engine may fail, and
// is restarted with a capped backoff.
func (h *Hub) runEngine(ctx context.Context) {
	defer h.bg.Done()
	backoff := 100 * time.Millisecond
	for {
		err := h.engine.Run(ctx, (*hubRelay)(h))
		if ctx.Err() != nil {
			return
		}
		h.log.Error("transport: engine stopped; restarting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// hubRelay is the Hub as the engine's Relay, kept off the Hub's API.
type hubRelay Hub

// PresenceChanged relays an edge to every connection except, for an online
// edge, the user's own connections: their welcome frame already says so, and
// the welcome is then followed by what the client itself asked for.
func (r *hubRelay) PresenceChanged(uid string, online bool) {
	skip := ""
	if online {
		skip = uid
	}
	(*Hub)(r).broadcast(presenceMsg(uid, online), skip)
}

func (r *hubRelay) Broadcast(msg []byte) { (*Hub)(r).broadcast(msg, "") }

// broadcast queues msg on every connection of this node but those of user
// skip. A connection whose queue is full is closed as a slow consumer, after
// the lock is released.
func (h *Hub) broadcast(msg []byte, skip string) {
	var slow []*conn
	h.bmu.RLock()
	for c := range h.conns {
		if c.uid != skip && !c.enqueue(msg) {
			slow = append(slow, c)
		}
	}
	h.bmu.RUnlock()
	for _, c := range slow {
		h.m.dropped.Inc()
		c.closeWith(CloseSlowConsumer, "slow consumer", reasonSlow)
	}
}

// addLocked counts c as a live connection of its user. h.mu must be held.
func (h *Hub) addLocked(c *conn) {
	u := h.users[c.uid]
	if u == nil {
		u = &userState{}
		h.users[c.uid] = u
		h.m.users.Inc()
	}
	if u.grace != nil {
		h.tracker.Remove(u.grace)
		u.grace = nil
	}
	u.conns++
	c.counted = true
	h.reportLocked(c.uid, u)
}

// dropLocked stops counting c; the last connection of a user starts the
// grace period or reports the user offline. Idempotent. h.mu must be held.
func (h *Hub) dropLocked(c *conn) {
	if !c.counted {
		return
	}
	c.counted = false
	u := h.users[c.uid]
	u.conns--
	if u.conns > 0 {
		h.reportLocked(c.uid, u)
		return
	}
	if h.grace > 0 && !h.closing {
		u.grace = &conn{hub: h, uid: c.uid, kind: kindGrace}
		h.tracker.TouchFor(u.grace, h.grace)
		return
	}
	h.goneLocked(c.uid)
}

func (h *Hub) goneLocked(uid string) {
	delete(h.users, uid)
	h.m.users.Dec()
	h.engine.SetLocal(uid, 0)
}

func (h *Hub) reportLocked(uid string, u *userState) {
	if u.conns != u.reported {
		u.reported = u.conns
		h.engine.SetLocal(uid, u.conns)
	}
}

// onIdle probes a silent WebSocket with a ping, which browsers answer even
// from a background tab.
func (h *Hub) onIdle(c *conn) {
	if c.kind == kindWS {
		c.enqueue(nil) // nil is the ping item
	}
}

// onOffline handles a key that timed out. A key touched again between the
// step and this callback is back in the ring and is left alone.
func (h *Hub) onOffline(c *conn) {
	switch c.kind {
	case kindWS:
		if !h.tracker.Online(c) {
			c.closeWith(CloseIdleTimeout, "idle timeout", reasonIdle)
		}
	case kindHeartbeat:
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.tracker.Online(c) {
			return
		}
		if h.heartbeats[c.uid] == c {
			delete(h.heartbeats, c.uid)
		}
		h.dropLocked(c)
	case kindGrace:
		h.mu.Lock()
		defer h.mu.Unlock()
		u := h.users[c.uid]
		if u == nil || u.grace != c {
			return // a connection came back and cancelled this grace period
		}
		u.grace = nil
		if u.conns == 0 {
			h.goneLocked(c.uid)
		}
	}
}

// heartbeat keeps uid online for one timeout, as a connection of its own.
func (h *Hub) heartbeat(uid string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return errShuttingDown
	}
	hb := h.heartbeats[uid]
	if hb == nil {
		hb = &conn{hub: h, uid: uid, kind: kindHeartbeat}
		h.heartbeats[uid] = hb
		h.addLocked(hb)
	}
	h.tracker.Touch(hb)
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
	for uid, hb := range h.heartbeats {
		h.tracker.Remove(hb)
		h.dropLocked(hb)
		delete(h.heartbeats, uid)
	}
	for uid, u := range h.users {
		if u.grace != nil && u.conns == 0 {
			h.tracker.Remove(u.grace)
			h.goneLocked(uid)
		}
	}
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
	return err
}
