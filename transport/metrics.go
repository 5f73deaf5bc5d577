package transport

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Close reasons, the "reason" label of presenced_closes_total.
const (
	reasonIdle     = "idle"         // silent past the timeout: 4408
	reasonSlow     = "slow"         // send queue full: CloseSlowConsumer
	reasonShutdown = "shutdown"     // Hub.Shutdown: 1001
	reasonTooBig   = "too_big"      // frame over MaxMessage: 1009
	reasonClient   = "client"       // the client closed or the network failed
	reasonKicked   = "disconnected" // Hub.Disconnect: 4403
	reasonExpired  = "expired"      // the session's token expired: 4401
	reasonFlood    = "flood"        // over the inbound rate limit: 1008
	reasonInvalid  = "invalid"      // a text frame that is not UTF-8: 1007
)

type metrics struct {
	connections prometheus.Gauge
	users       prometheus.GaugeFunc
	frames      *prometheus.CounterVec
	keepalives  *prometheus.CounterVec
	closes      *prometheus.CounterVec
	steps       prometheus.Histogram
	dropped     prometheus.Counter
	chats       prometheus.Counter
	refused     prometheus.Counter
	lost        *prometheus.CounterVec
	// connsRefused counts upgrades refused by fullness, pre-resolved:
	// a crowd at the cap must not hash labels.
	connsRefused [userFull + 1]prometheus.Counter
	refusals     *prometheus.CounterVec
	maxConns     prometheus.Gauge
	tick         prometheus.GaugeFunc
	byMode       [2]prometheus.GaugeFunc // polled, parked
	// hub is read by byMode at each scrape: the poller's table and the
	// Hub's map of parked connections are the counts, so no path that
	// opens or ends a connection has a gauge of its own to keep right.
	hub atomic.Pointer[Hub]

	// Pre-resolved children: the keepalive path must not hash labels.
	kaText, kaBinary, kaPing, kaPong, kaHeartbeat prometheus.Counter
	framesByType                                  map[string]prometheus.Counter
}

// frameTypes are the "type" label values of presenced_frames_sent_total:
// the frames the server sends, and "other" for any the protocol adds.
var frameTypes = []string{"welcome", "joined", "left", "presence", "watching", "status", "chat", "publish", "message", "pong", "error", "members", "other"}

// sent counts an outbound text frame by its type.
func (m *metrics) sent(typ string) {
	c, ok := m.framesByType[typ]
	if !ok {
		c = m.framesByType["other"]
	}
	c.Inc()
}

// observeStep records how long one step of the Node's clock took.
func (m *metrics) observeStep(took time.Duration) { m.steps.Observe(took.Seconds()) }

// newMetrics makes the Hub's metrics, named namespace_name ("presenced_" by
// default) and carrying labels, so two Hubs may share a registerer.
func newMetrics(reg prometheus.Registerer, namespace string, labels prometheus.Labels, localUsers func() float64) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "connections", ConstLabels: labels,
			Help: "Live WebSocket connections on this node.",
		}),
		users: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "users_online", ConstLabels: labels,
			Help: "Users with at least one live connection or heartbeat on this node (grace periods included).",
		}, localUsers),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "frames_sent_total", ConstLabels: labels,
			Help: "Text frames queued for clients, by type.",
		}, []string{"type"}),
		keepalives: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "keepalives_total", ConstLabels: labels,
			Help: "Inbound keepalives by kind: text, binary, ping and pong frames, and HTTP heartbeats.",
		}, []string{"kind"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "closes_total", ConstLabels: labels,
			Help: "Closed WebSocket connections by reason: idle, slow, shutdown, too_big, client, disconnected, expired, flood, invalid.",
		}, []string{"reason"}),
		steps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "ring_step_seconds", ConstLabels: labels,
			Help:    "Time taken by one step of the clock: timeouts, leases, grace periods and the tick's presence frames.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12), // 1µs .. ~4s
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_dropped_total", ConstLabels: labels,
			Help: "Outbound frames not queued because their connection's send queue was full; that connection is closed as a slow consumer (1008).",
		}),
		chats: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "chat_messages_total", ConstLabels: labels,
			Help: "Chat messages received from this node's connections.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "frames_refused_total", ConstLabels: labels,
			Help: "Inbound frames refused because their connection's inbox was full (the client gets an error frame).",
		}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "frames_lost_total", ConstLabels: labels,
			Help: "Inbound frames a closing connection had sent that could not be handled in time, by type: chat, typing, join, watch, custom, other. No sender is left to tell.",
		}, []string{"type"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "connections_refused_total", ConstLabels: labels,
			Help: "WebSocket upgrades refused because this node held MaxConns (reason max_conns, HTTP 503) or the user MaxConnsPerUser (reason per_user, HTTP 429).",
		}, []string{"reason"}),
		maxConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "connections_max", ConstLabels: labels,
			Help: "The most WebSocket connections this node holds (MaxConns, -max-conns); 0: no cap.",
		}),
	}
	m.connsRefused[nodeFull] = m.refusals.WithLabelValues("max_conns")
	m.connsRefused[userFull] = m.refusals.WithLabelValues("per_user")
	// The step is the Node's, which a Hub given one did not configure.
	m.tick = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "ring_tick_seconds", ConstLabels: labels,
		Help: "The clock's step: steps slower than it on average, or fewer than one a tick, mean the clock falls behind.",
	}, func() float64 {
		if h := m.hub.Load(); h != nil {
			return h.node.Tick().Seconds()
		}
		return 0
	})
	for i, mode := range []string{"polled", "parked"} {
		withMode := prometheus.Labels{"mode": mode}
		for k, v := range labels {
			withMode[k] = v
		}
		m.byMode[i] = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "connections_by_mode", ConstLabels: withMode,
			Help: "Live WebSocket connections by how they are read: polled (no goroutine while idle) or parked (a reader goroutine each: TLS served by Go, a wrapped listener, ParkReaders, or a system without epoll).",
		}, func() float64 {
			h := m.hub.Load()
			if h == nil {
				return 0
			}
			polled, parked := h.connsByMode()
			return float64([2]int{polled, parked}[i])
		})
	}
	m.kaText = m.keepalives.WithLabelValues("text")
	m.kaBinary = m.keepalives.WithLabelValues("binary")
	m.kaPing = m.keepalives.WithLabelValues("ping")
	m.kaPong = m.keepalives.WithLabelValues("pong")
	m.kaHeartbeat = m.keepalives.WithLabelValues("heartbeat")
	m.framesByType = make(map[string]prometheus.Counter, len(frameTypes))
	for _, t := range frameTypes {
		m.framesByType[t] = m.frames.WithLabelValues(t)
	}
	for _, r := range []string{reasonIdle, reasonSlow, reasonShutdown, reasonTooBig, reasonClient, reasonKicked, reasonExpired, reasonFlood, reasonInvalid} {
		m.closes.WithLabelValues(r)
	}
	// Every series at zero from the start, so a rate over them is 0, not
	// empty, before the first loss.
	for _, t := range []string{"chat", "typing", "join", "watch", "custom", "other"} {
		m.lost.WithLabelValues(t)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connections, m.users, m.frames, m.keepalives, m.closes, m.steps, m.dropped, m.chats, m.refused, m.lost, m.refusals, m.maxConns, m.tick, m.byMode[0], m.byMode[1], newLogCollector(m, namespace, labels)} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("transport: register metrics: %w", err)
		}
	}
	return m, nil
}

// connsByMode counts the live WebSockets the poller reads and those that
// park a reader goroutine.
func (h *Hub) connsByMode() (polled, parked int) {
	if h.poller != nil {
		polled = h.poller.count()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return polled, len(h.live)
}
