// Package transport serves presence over WebSocket and HTTP, on top of a
// presence.Node: it maps sockets and requests onto the node, which keeps
// the clock. Every frame a client sends is a keepalive (a Touch); the node
// probes a silent socket with a ping and closes it at the timeout. Clients
// join channels and watch users, and hear only of those: a snapshot on join,
// then at most one coalesced diff per channel and one status frame per tick.
//
// A Hub is a component: an http.Handler for GET /ws, the HTTP API
// (APIHandler) and the health checks (HealthHandler), each of which can also
// be mounted alone. Its Go API (Publish, Send, Disconnect, Online, Members)
// and hooks (Config.Authorize, OnMessage, OnPresence) let a chat backend
// drive it; Config.Node lets it share a presence.Node the embedder made.
//
// Close codes the Hub sends are those of package protocol: 4408 idle
// timeout, 4401 token expired, 4403 disconnected (Hub.Disconnect), 1001 on
// Shutdown, 1009 for a frame over Config.MaxMessage (a watch frame may be
// larger, by room for MaxWatch IDs), 1007 for a text frame
// that is not UTF-8, and 1008 to a client that does not read fast enough
// ("slow consumer") or sends too fast ("rate limit exceeded").
package transport

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// Defaults used when a Config field is zero.
const (
	DefaultMaxMessage    = 4096
	DefaultQueueBytes    = 1 << 20
	DefaultFrameRate     = 50
	DefaultFrameBurst    = 100
	DefaultByteRate      = 64 << 10
	DefaultConnsPerUser  = 100
	DefaultWriteTimeout  = 10 * time.Second
	DefaultCloseTimeout  = time.Second
	DefaultSocketBuffer  = 64 << 10
	DefaultPresenceLimit = 100
	MaxPresenceLimit     = 1000
)

// readBufferSize is gorilla's read buffer per connection, the least it
// takes (a control frame's payload): it holds frame headers and control
// frames, and larger payloads are read past it. net/http's 4 KiB reader is
// released.
const readBufferSize = 128

// Config configures a Hub. The zero value is a 31-slot ring stepping once a
// second (a 30 s timeout), in-memory presence and demo authentication.
type Config struct {
	// Node, if set, is the presence.Node the Hub serves: the embedder made
	// it, runs its clock (Node.Run) and closes it, and may use it beside the
	// Hub. The presence settings below are then ignored. nil: the Hub makes
	// one from them and runs it until Shutdown.
	Node *presence.Node

	// The presence settings of the Node the Hub makes. Each is the field of
	// presence.Config of the same name, documented there with its default,
	// and is passed on as it is (Logger too). Shutdown has the Engine drop
	// this node's records if it is a presence.Withdrawer; releasing a
	// networked engine after that is the caller's job.
	Slots         int
	Tick          time.Duration
	Grace         time.Duration
	LastSeenTTL   time.Duration
	Engine        presence.Engine
	MemberList    int
	PresenceLists int
	MaxWatch      int
	MaxChannels   int
	OnPresence    func(uid string, online bool)
	OnActivity    func(uid string, away bool)
	OnEdges       func(edges []presence.Edge) // see package webhook
	AwayAfter     time.Duration
	TypingTTL     time.Duration

	// Auth identifies clients of /ws and /api/heartbeat. nil means DemoAuth,
	// which trusts ?uid=; New logs a warning then, through slog.Default()
	// when Logger is nil, so an embed left open says so. With a
	// SessionAuthenticator such as JWTAuth, a connection is closed with 4401
	// when its token expires, unless the client refreshes it first.
	Auth Authenticator
	// JWT, if any of its fields but Logger is set, has the Hub verify
	// tokens with NewJWTAuth(JWT) (HS256 with a secret, RS256 or ES256 with
	// a public key file or a JWKS URL) and stop its JWKS refreshes at
	// Shutdown; its Logger defaults to Logger. Setting it and Auth both is
	// an error, as is a JWTConfig that NewJWTAuth refuses.
	JWT JWTConfig
	// APIKey, if set, guards the server API (/api/presence, /api/channels,
	// /api/publish, /api/send, /api/disconnect): a request needs
	// "Authorization: apikey <key>", else 401. Without it, that API is open
	// in demo mode and answers 403 otherwise: presence is not public when
	// users sign in.
	APIKey string

	// Authorize, if set, says whether uid may join channel, on top of what
	// its token's channels claim allows; a refused join gets an error frame.
	Authorize func(uid, channel string) bool
	// UserInfo, if set, says what the application vouches for about uid,
	// shown to the clients that see it (a JSON object of at most
	// protocol.MaxInfo bytes; nil: none), for a connection whose token
	// carries no info claim. It is asked once per connection, before the
	// upgrade; an error refuses the connection with 401. Demo mode never
	// asks.
	UserInfo func(ctx context.Context, uid string) (json.RawMessage, error)

	// AuthorizeWatch, if set, says whether uid may watch target, in demo
	// mode too. nil: the session's watch claim decides (Session.MayWatch),
	// so a user whose token has none may watch nobody; in demo mode
	// everyone may watch everyone. The IDs a watch frame may not have get an
	// error frame; the rest are watched.
	AuthorizeWatch func(uid, target string) bool
	// OnMessage receives client frames of types the Hub does not handle,
	// in order per connection: after the frames the client sent before,
	// before the ones after, one at a time (while it runs, that
	// connection's later frames wait; other connections' do not), even for
	// a frame that came just before the client closed. ctx ends once the
	// connection has closed and its frames were handled. An error it
	// returns goes back to the client as an error frame, in its turn. nil:
	// such frames get an "unknown type" error frame.
	OnMessage func(ctx context.Context, uid string, typ string, frame json.RawMessage) error
	// Origins lists browser origins allowed besides the request's own host:
	// "*", full origins ("https://app.example.com") or hosts
	// ("app.example.com:8443"). Other origins get HTTP 403.
	Origins []string
	// Hosts lists the host names the Hub answers to besides localhost names
	// and IP addresses ("chat.example.com", with or without a port), and
	// the hosts of Origins. In demo mode a request for any other Host is
	// refused with 403 before anything else, which stops a web site whose
	// name resolves to this machine from driving it (DNS rebinding); with
	// Auth set the check is on only when Hosts is set.
	Hosts []string

	// MaxMessage is the largest inbound frame in bytes; a larger one closes
	// the connection with 1009, but for a watch frame, which may be larger
	// by room for a full watch list. 0 means 4096.
	MaxMessage int64
	// QueueBytes bounds the frames queued for one connection: a client that
	// falls further behind, or whose socket takes no frame for WriteTimeout,
	// is closed as a slow consumer (1008). 0 means 1 MiB. Presence diffs
	// are coalesced per tick, so no burst of edges fills a queue.
	QueueBytes int
	// FrameRate and FrameBurst limit the frames (of any kind) one connection
	// may send: on average per second, and at once; ByteRate the bytes per
	// second, in bursts of 16 seconds' worth. A frame over the limit is
	// dropped unread, the first of a run with an error frame; a connection
	// that keeps sending over it is closed with 1008 "rate limit exceeded":
	// at twice FrameRate within 10 s, at twenty times within 3 s, while a
	// single burst of FrameBurst+100 frames is forgiven. 0 means 50, 100 and
	// 64 KiB.
	FrameRate  float64
	FrameBurst int
	ByteRate   int
	// MaxConnsPerUser bounds one user's WebSockets on this node; one more
	// is refused with HTTP 429 before the upgrade. 0 means 100.
	MaxConnsPerUser int
	// MaxConns bounds this node's WebSockets; one more is refused with
	// HTTP 503 and Retry-After before the upgrade, so the process keeps
	// the file descriptors its health checks, its API and its engine need.
	// MaxConnsWithin(DescriptorLimit()) leaves them a reserve. 0: no cap.
	MaxConns     int
	WriteTimeout time.Duration // deadline of one outbound frame; 0 means 10 s
	CloseTimeout time.Duration // wait for the client's answer to a close frame; 0 means 1 s
	// SocketBuffer caps the kernel's send buffer of each WebSocket
	// (SO_SNDBUF), so a client that stops reading blocks the writer, and is
	// then closed, instead of parking megabytes in the kernel; 0 means
	// 64 KiB, -1 leaves the operating system's autotuning.
	SocketBuffer int
	// ParkReaders keeps a goroutine per connection blocked in read, as most
	// Go WebSocket servers do. By default, on Linux, connections are polled
	// instead: the Hub waits for readable sockets with epoll and reads on a
	// goroutine only while a connection has frames, so an idle connection
	// holds no goroutine and no read buffer. Connections that are not plain
	// TCP (TLS served by Go itself), and every connection on other systems,
	// always park a reader.
	ParkReaders bool

	Logger     *slog.Logger          // nil: silent
	Registerer prometheus.Registerer // nil: metrics are kept but not registered
	// MetricsNamespace starts every metric name; "" means "presenced".
	// MetricsLabels are constant labels on every metric. Either lets two
	// Hubs share a Registerer.
	MetricsNamespace string
	MetricsLabels    prometheus.Labels
}

// Hub serves WebSocket connections and the HTTP API. Create one with New and
// stop it with Shutdown.
type Hub struct {
	node     *presence.Node
	ownNode  bool // made by New: the Hub runs and closes it
	auth     Authenticator
	stopAuth func() // ends what Config.JWT started
	demo     bool
	hosts    *hostPolicy
	apiKey   string

	authorize      func(uid, channel string) bool
	authorizeWatch func(uid, target string) bool
	userInfo       func(ctx context.Context, uid string) (json.RawMessage, error)
	onMessage      func(ctx context.Context, uid string, typ string, frame json.RawMessage) error
	origins        *originPolicy
	upgrader       websocket.Upgrader
	blankUpgrader  websocket.Upgrader // makes framers: see newFramer
	framers        chan *framer       // spares: see spareFramers
	poller         *poller            // nil: every connection parks a reader
	workers        *workers
	log            *slog.Logger
	m              *metrics
	mux            *http.ServeMux // every route
	api            *http.ServeMux // the HTTP API alone
	health         *http.ServeMux // the health checks alone
	sse            *http.ServeMux // Server-Sent Events alone

	maxMessage   int64
	queueBytes   int
	limits       limits
	maxPerUser   int
	maxConns     int
	writeTimeout time.Duration
	closeTimeout time.Duration
	handover     time.Duration // chatHandover; a test that stalls the engine sets more
	sseKeepalive time.Duration // DefaultSSEKeepalive; a test sets less
	socketBuffer int

	// mu guards the sockets' bookkeeping. Lock order: mu before the
	// poller's and a conn's mu (the whole server's order is package
	// lockorder's); neither is held while calling the Node.
	mu       lockorder.Mutex[lockorder.Hub]
	live     map[*conn]struct{} // upgraded WebSockets not yet finished, unless the poller has them, and streams
	sessions map[string]*conn   // the live streams, by session (sse.go)
	livePeak int
	perUser  map[string]int // WebSockets per user, counted from before the upgrade
	conns    int            // the sum of perUser
	userPeak int
	closing  bool
	readers  sync.WaitGroup // one per live WebSocket

	lastDropLog atomic.Int64 // UnixNano of the last log line about dropped frames

	cancel   context.CancelFunc
	bg       sync.WaitGroup
	shutOnce sync.Once
	shutDone chan struct{}
}

// New returns a running Hub for cfg: from now on until Shutdown, its Node's
// clock steps (unless Config.Node is the embedder's) and it serves.
func New(cfg Config) (*Hub, error) { return newHub(cfg, false) }

// newHub is New; with manual set, a Node the Hub makes steps only when
// Node.Step is called.
func newHub(cfg Config, manual bool) (*Hub, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxMessage < 0 || cfg.QueueBytes < 0 || cfg.WriteTimeout < 0 || cfg.CloseTimeout < 0 || cfg.SocketBuffer < -1 ||
		cfg.FrameRate < 0 || cfg.FrameBurst < 0 || cfg.ByteRate < 0 || cfg.MaxConnsPerUser < 0 || cfg.MaxConns < 0 {
		return nil, errors.New("transport: Config: MaxMessage, QueueBytes, WriteTimeout, CloseTimeout, FrameRate, FrameBurst, ByteRate, MaxConnsPerUser and MaxConns must not be negative, SocketBuffer not below -1")
	}
	for _, o := range cfg.Origins {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if err := CheckOrigin(o); err != nil {
			return nil, fmt.Errorf("transport: Config.Origins: %q: %w", o, err)
		}
	}
	for _, host := range cfg.Hosts {
		if err := CheckHost(host); err != nil {
			return nil, fmt.Errorf("transport: Config.Hosts: %q: %w", host, err)
		}
	}
	stopAuth := func() {}
	if cfg.JWT.used() {
		if cfg.Auth != nil {
			return nil, errors.New("transport: Config: Auth and JWT both set: set one")
		}
		if cfg.JWT.Logger == nil {
			cfg.JWT.Logger = log
		}
		var err error
		if cfg.Auth, stopAuth, err = NewJWTAuth(cfg.JWT); err != nil {
			return nil, err
		}
	}
	h, err := build(cfg, log, manual, stopAuth)
	if err != nil {
		stopAuth()
	}
	return h, err
}

// build is newHub once the Authenticator is made.
func build(cfg Config, log *slog.Logger, manual bool, stopAuth func()) (*Hub, error) {
	h := &Hub{
		stopAuth:       stopAuth,
		auth:           cfg.Auth,
		apiKey:         cfg.APIKey,
		authorize:      cfg.Authorize,
		authorizeWatch: cfg.AuthorizeWatch,
		userInfo:       cfg.UserInfo,
		onMessage:      cfg.OnMessage,
		origins:        newOriginPolicy(cfg.Origins),
		log:            log,
		maxMessage:     cmp.Or(cfg.MaxMessage, DefaultMaxMessage),
		queueBytes:     min(cmp.Or(cfg.QueueBytes, DefaultQueueBytes), math.MaxInt32), // a conn counts it in 32 bits
		maxPerUser:     cmp.Or(cfg.MaxConnsPerUser, DefaultConnsPerUser),
		maxConns:       cfg.MaxConns,
		limits: limits{
			frameRate:  cmp.Or(cfg.FrameRate, DefaultFrameRate),
			frameBurst: float64(cmp.Or(cfg.FrameBurst, DefaultFrameBurst)),
			byteRate:   float64(cmp.Or(cfg.ByteRate, DefaultByteRate)),
			byteBurst:  16 * float64(cmp.Or(cfg.ByteRate, DefaultByteRate)),
		},
		perUser:      make(map[string]int),
		writeTimeout: cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout),
		closeTimeout: cmp.Or(cfg.CloseTimeout, DefaultCloseTimeout),
		handover:     chatHandover,
		socketBuffer: cmp.Or(cfg.SocketBuffer, DefaultSocketBuffer),
		live:         make(map[*conn]struct{}),
		sessions:     make(map[string]*conn),
		sseKeepalive: sseKeepalive,
		shutDone:     make(chan struct{}),
		workers:      newWorkers(),
	}
	if h.auth == nil {
		h.auth = DemoAuth()
	}
	if _, h.demo = h.auth.(demoAuth); h.demo {
		warn := log
		if cfg.Logger == nil {
			warn = slog.Default() // an embed without Auth is an open server: say so somewhere
		}
		warn.Warn("transport: demo mode: trusting ?uid=, anyone can claim any user ID")
	}
	h.hosts = newHostPolicy(h.demo, cfg.Hosts, cfg.Origins)
	ns := cfg.MetricsNamespace
	if ns == "" {
		ns = "presenced"
	}
	m, err := newMetrics(cfg.Registerer, ns, cfg.MetricsLabels, h.localUsers)
	if err != nil {
		return nil, err
	}
	h.m = m
	m.maxConns.Set(float64(h.maxConns))
	h.node = cfg.Node
	if h.node == nil {
		h.ownNode = true
		pc := cfg.presence()
		pc.OnStep = m.observeStep
		h.node, err = presence.New(pc)
		if err != nil {
			return nil, fmt.Errorf("transport: %w", err)
		}
	}
	h.upgrader = websocket.Upgrader{
		// Not 0: gorilla would then keep net/http's 4 KiB reader for the
		// connection's life instead of a buffer of its own over wire.
		// Write buffers come from a pool, so an idle connection holds none.
		// EnableCompression stays off: wire's scanner hands gorilla any
		// frame with RSV bits as one it refuses (1002).
		ReadBufferSize:  readBufferSize,
		WriteBufferPool: &sync.Pool{},
		CheckOrigin:     h.origins.allow,
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			writeError(w, status, reason.Error())
		},
	}
	h.blankUpgrader = h.upgrader
	h.blankUpgrader.CheckOrigin = func(*http.Request) bool { return true }
	h.framers = make(chan *framer, spareFramers*h.workers.max)
	h.node.OnForward(h.forwarded)
	h.routes()
	if !cfg.ParkReaders {
		if h.poller, err = newPoller(); err != nil {
			log.Info("transport: one reader goroutine per connection", "err", err)
		} else {
			h.bg.Go(h.poller.run)
		}
	}
	h.m.hub.Store(h) // presenced_connections_by_mode counts from here

	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	if h.ownNode && !manual {
		h.bg.Go(func() { h.node.Run(ctx) })
	}
	return h, nil
}

// Node returns the presence.Node the Hub serves, for what the Hub does not
// wrap: heartbeats, watch lists and joins of the embedder's own.
func (h *Hub) Node() *presence.Node { return h.node }

// Timeout is how long a connection may stay silent: (Slots-1)*Tick.
func (h *Hub) Timeout() time.Duration { return h.node.Timeout() }

// localUsers is the users_online gauge: 0 until the Node exists.
func (h *Hub) localUsers() float64 {
	if h.node == nil {
		return 0
	}
	return float64(h.node.LocalUsers())
}

var errShuttingDown = errors.New("transport: shutting down")

// dropped counts a frame not queued for uid because its connection's queue
// was full (the connection is then closed as a slow consumer), and logs it
// at most once a second.
func (h *Hub) dropped(uid, frameType string) {
	h.m.dropped.Inc()
	now := time.Now().UnixNano()
	last := h.lastDropLog.Load()
	if now-last >= int64(time.Second) && h.lastDropLog.CompareAndSwap(last, now) {
		h.log.Warn("transport: a frame was dropped: its connection's send queue is full, and the connection is closed as a slow consumer",
			"uid", uid, "type", frameType, "dropped_total_metric", "presenced_events_dropped_total")
	}
}

// Publish sends data, valid JSON, in a publish frame to every connection
// that joined channel, on every node:
// {"type":"publish","channel":"lobby","data":...}.
func (h *Hub) Publish(ctx context.Context, channel string, data json.RawMessage) error {
	return h.node.Publish(ctx, channel, data)
}

// Send sends data, valid JSON, in a message frame to every connection of
// uid, on every node: {"type":"message","data":...}.
func (h *Hub) Send(ctx context.Context, uid string, data json.RawMessage) error {
	if !protocol.ValidUID(uid) {
		return fmt.Errorf("transport: Send: %w: %q", ErrInvalidUID, uid)
	}
	return h.node.Send(ctx, uid, data)
}

// Disconnect closes every connection of uid, on every node, with 4403
// "disconnected". It does not stop the user from connecting again: refuse
// that in the Authenticator.
func (h *Hub) Disconnect(ctx context.Context, uid string) error {
	return h.node.DisconnectUser(ctx, uid)
}

// Online returns how many live connections uid has, on every node; 0 means
// offline.
func (h *Hub) Online(ctx context.Context, uid string) (conns int, err error) {
	st, err := h.node.Status(ctx, uid)
	return st.Conns, err
}

// Members returns how many members channel has and the first limit of their
// IDs in ascending order.
func (h *Hub) Members(ctx context.Context, channel string, limit int) (count int, members []string, err error) {
	count, members, _, err = h.node.Members(ctx, channel, "", max(limit, 1))
	if limit <= 0 && err == nil {
		members = []string{}
	}
	return count, members, err
}

// Shutdown closes every WebSocket with 1001, refuses new ones with 503,
// reports this node's users offline and waits until every connection is
// gone or ctx is done; then it closes the remaining sockets and, if the Hub
// made its Node, has it withdraw (Node.Withdraw: an engine shared with
// other nodes drops this node's records, and the edges that makes reach
// OnPresence and OnEdges) and stops it. When ctx ends first it cancels
// every connection's context (an OnMessage waiting on it returns), closes
// the remaining sockets and returns an error wrapping ctx.Err() at once,
// even while a hook that ignores its context still runs: the rest of the
// shutdown follows when that hook returns. Otherwise it returns the
// engine's error. Calls after the first wait until the shutdown is over,
// or their ctx is done.
func (h *Hub) Shutdown(ctx context.Context) error {
	err := errShuttingDown
	h.shutOnce.Do(func() { err = h.shutdown(ctx) })
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
	live := make([]*conn, 0, len(h.live))
	for c := range h.live {
		live = append(live, c)
	}
	if h.poller != nil {
		live = h.poller.appendConns(live)
	}
	h.mu.Unlock()
	if h.ownNode {
		h.node.Shutdown()
	}

	for _, c := range live {
		c.closeWith(protocol.CloseGoingAway, protocol.ReasonShutdown, reasonShutdown)
	}
	drained := make(chan struct{})
	go func() {
		h.readers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return h.finishShutdown(ctx, nil)
	case <-ctx.Done():
	}
	err := fmt.Errorf("transport: shutdown: %w", ctx.Err())
	for _, c := range live {
		if c.life != nil {
			c.life.cancel() // an OnMessage waiting on its context returns
		}
		c.closeSocket() // its reader finishes
	}
	// Readers finish at once when no hook holds them; give them a moment.
	select {
	case <-drained:
		return h.finishShutdown(ctx, err)
	case <-time.After(100 * time.Millisecond):
	}
	// A hook that ignores its context still holds a connection: Shutdown
	// returns by its deadline all the same, and the rest of the shutdown
	// (the node's last edges, the callbacks' end) follows when the hook
	// returns, its wait for Redis bounded by lateWithdraw.
	h.log.Warn("transport: shutdown: a hook still runs past the deadline; finishing when it returns")
	go func() {
		<-drained
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateWithdraw)
		defer cancel()
		_ = h.finishShutdown(wctx, nil)
	}()
	return err
}

// lateWithdraw bounds the withdrawal of a shutdown that outlived its
// context because a hook did.
const lateWithdraw = 5 * time.Second

// finishShutdown ends the Hub once every connection's reader has finished:
// the poller and the background goroutines stop, then an own Node withdraws
// this node's presence (its last edges reach the callbacks) and closes.
func (h *Hub) finishShutdown(ctx context.Context, err error) error {
	if h.poller != nil {
		h.poller.close()
	}
	h.cancel()
	h.bg.Wait()
	h.stopAuth()
	if h.ownNode {
		// An engine that writes in the background makes this node's last
		// edges after the connections are gone: they must come before the
		// callbacks stop.
		if werr := h.node.Withdraw(ctx); werr != nil {
			err = errors.Join(err, fmt.Errorf("transport: shutdown: withdraw this node's presence: %w", werr))
		}
		h.node.Close()
	}
	close(h.shutDone)
	return err
}
