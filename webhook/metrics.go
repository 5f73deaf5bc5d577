package webhook

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Sender's Prometheus collectors, kept whether or not they
// are registered.
type metrics struct {
	sent    prometheus.Counter
	retried prometheus.Counter
	dropped prometheus.Counter
	queue   prometheus.Gauge
	bound   prometheus.Gauge
}

// newMetrics makes the collectors, named namespace_webhook_..., with limit,
// the queue's bound, as queue_limit, and registers them with reg unless it
// is nil. If one fails to register, those registered before it are
// unregistered, so that a New that failed leaves reg as it was.
func newMetrics(reg prometheus.Registerer, namespace string, limit int) (*metrics, error) {
	const sub = "webhook"
	m := &metrics{
		sent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "events_sent_total",
			Help: "Events in batches the webhook backend answered with a 2xx status."}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "events_retried_total",
			Help: "Events in batches sent again after a non-2xx answer, no answer in time or a network error; once per retry."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: sub, Name: "events_dropped_total",
			Help: "Events never sent: the oldest waiting ones, dropped when the queue was full."}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "queue_length",
			Help: "Events waiting to be sent, not counting the batch being delivered."}),
		bound: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: sub, Name: "queue_limit",
			Help: "Most events that may wait (the Queue setting): past it the oldest are dropped."}),
	}
	m.bound.Set(float64(limit))
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.sent, m.retried, m.dropped, m.queue, m.bound}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("webhook: register metrics (namespace %q): %w", namespace, err)
		}
	}
	return m, nil
}
