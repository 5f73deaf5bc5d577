package cluster

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/presence"
)

// metrics are the engine's Prometheus collectors; registered only when the
// Config has a Registerer.
type metrics struct {
	redisUp     prometheus.Gauge
	redisErrors *prometheus.CounterVec
	usersHeld   prometheus.Gauge
	pending     prometheus.Gauge
	rewritten   prometheus.Counter
	reaped      prometheus.Counter
	edges       *prometheus.CounterVec
	relayed     *prometheus.CounterVec
	received    prometheus.Counter
	renew       prometheus.Histogram

	subscriptionsLost prometheus.Counter

	publishQueue  prometheus.Gauge
	publishFailed *prometheus.CounterVec
	publishedLate prometheus.Counter
}

// newMetrics makes the collectors, named namespace_cluster_... ("presenced"
// if namespace is empty), and registers them with reg unless it is nil. If
// one fails to register, those registered before it are unregistered, so
// that a New that failed leaves reg as it was.
func newMetrics(reg prometheus.Registerer, namespace string) (*metrics, error) {
	const sub = "cluster"
	ns := namespace
	if ns == "" {
		ns = "presenced"
	}
	m := &metrics{
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "redis_up",
			Help: "1 while Redis answers this node, takes its writes and delivers every shard it follows; 0 otherwise."}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "redis_errors_total",
			Help: "Failed Redis operations by operation."}, []string{"op"}),
		usersHeld: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "users_held",
			Help: "Users this node holds connections of, as written to Redis."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "pending_changes",
			Help: "Local presence changes not yet written to Redis (grows while Redis is unreachable)."}),
		rewritten: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "records_rewritten_total",
			Help: "Records this node wrote again because Redis had lost them or taken the node for dead."}),
		reaped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "reaped_offline_total",
			Help: "Offline edges this node emitted by reaping the records of dead nodes."}),
		edges: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "edges_emitted_total",
			Help: "Presence edges this node's scripts emitted, by edge (online, offline, join, leave, away, active)."}, []string{"edge"}),
		relayed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "relayed_total",
			Help: "Events relayed to this node from the topics it follows, by kind (user, activity, member, member_activity, record, message)."}, []string{"kind"}),
		received: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "received_total",
			Help: "Messages Redis delivered to this node on the topics it follows."}),
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "renew_seconds",
			Help: "Time to renew this node's liveness in every shard.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9)}),
		subscriptionsLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "subscriptions_lost_total",
			Help: "Times a shard's subscription was lost (the connection failed, or Redis ended it at a failover or a slot migration) and made again."}),
		publishQueue: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "publish_queue",
			Help: "Messages (chat, publish, send, disconnect) waiting to be handed to Redis."}),
		publishFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "publish_failed_total",
			Help: "Messages reported not delivered, by reason: queue_full, timeout (Redis did not take it in time), too_late (Redis ran it past its last moment), cancelled (its caller's context, before it was sent), closed, error (Redis refused it)."}, []string{"reason"}),
		publishedLate: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "published_late_total",
			Help: "Messages Redis published after their sender had been told they were not: an answer slower than a quarter of the wait. Should stay 0."}),
	}
	m.redisUp.Set(1)
	// Every series at zero from the start, so a rate over them is 0, not
	// empty, before the first event.
	for _, op := range []string{"ping", "write", "claim", "records", "subscribe", "publish"} {
		m.redisErrors.WithLabelValues(op)
	}
	for _, k := range []presence.EdgeKind{presence.EdgeOnline, presence.EdgeOffline, presence.EdgeJoin, presence.EdgeLeave, presence.EdgeAway, presence.EdgeActive, presence.EdgeUpdate} {
		m.edges.WithLabelValues(k.String())
	}
	for _, k := range []string{"user", "activity", "member", "member_activity", "record", "message"} {
		m.relayed.WithLabelValues(k)
	}
	for _, r := range []string{"queue_full", "timeout", "too_late", "cancelled", "closed", "error"} {
		m.publishFailed.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.redisUp, m.redisErrors, m.usersHeld, m.pending, m.rewritten,
		m.reaped, m.edges, m.relayed, m.received, m.renew, m.subscriptionsLost, m.publishQueue, m.publishFailed, m.publishedLate}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("namespace %q: %w", ns, err)
		}
	}
	return m, nil
}
