package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/webhook"
)

// The counters and the gauge follow the queue and the deliveries, and two
// Senders share a Registerer under different namespaces.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	rc := newReceiver(t, hang(release, nil, 0)) // the first POST hangs, then is answered 500
	s := start(t, webhook.Config{URL: rc.URL, Queue: 20, MaxBatch: 10, Timeout: time.Minute,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Registerer: reg})
	other := newReceiver(t, nil)
	o := start(t, webhook.Config{URL: other.URL, Registerer: reg, MetricsNamespace: "other"})

	value := func(name string) float64 { return metric(t, reg, "presenced_webhook_"+name) }
	for _, name := range []string{"events_sent_total", "events_retried_total", "events_dropped_total", "queue_length"} {
		assert.Zero(t, value(name), name)
		assert.Zero(t, metric(t, reg, "other_webhook_"+name), name)
	}
	assert.Equal(t, 20.0, value("queue_limit"), "the Queue setting")
	assert.Equal(t, float64(webhook.DefaultQueue), metric(t, reg, "other_webhook_queue_limit"), "the default")

	evs := events(0, 35)
	s.Add(evs[:5]...)
	require.Eventually(t, func() bool { return rc.count() == 1 }, testWait, testPoll, "the POST that hangs")
	assert.Zero(t, value("queue_length"), "the batch being delivered is not waiting")
	s.Add(evs[5:]...) // 30 behind the batch; 20 fit
	assert.Equal(t, 20.0, value("queue_length"))
	assert.Equal(t, 10.0, value("events_dropped_total"))
	assert.Zero(t, value("events_sent_total"))

	close(release)
	want := append(evs[:5:5], evs[15:]...)
	requireSame(t, want, rc.waitDelivered(t, len(want), false))
	require.Eventually(t, func() bool { return value("events_sent_total") == 25 }, testWait, testPoll)
	assert.Equal(t, 5.0, value("events_retried_total"), "the batch of 5, sent again once")
	assert.Equal(t, 10.0, value("events_dropped_total"))
	assert.Zero(t, value("queue_length"))

	o.Add(events(0, 3)...)
	other.waitDelivered(t, 3, false)
	require.Eventually(t, func() bool { return metric(t, reg, "other_webhook_events_sent_total") == 3 }, testWait, testPoll)
	assert.Equal(t, 25.0, value("events_sent_total"), "one Sender's count moved the other's")

	// A third under a namespace taken fails, and leaves the registry as it was.
	_, err := webhook.New(webhook.Config{URL: other.URL, Registerer: reg, MetricsNamespace: "other"})
	require.ErrorContains(t, err, "register metrics")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	assert.Len(t, mfs, 10)
	assert.Equal(t, 3.0, metric(t, reg, "other_webhook_events_sent_total"))
}

// A redirect is not a delivery: the Sender's own client does not follow it
// (a 302 would turn the POST into a GET elsewhere), and retries.
func TestRedirectIsNotDelivery(t *testing.T) {
	elsewhere := newReceiver(t, nil)
	var posts atomic.Int32
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if posts.Add(1) == 1 {
			http.Redirect(w, r, elsewhere.URL, http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(redirecting.Close)
	reg := prometheus.NewRegistry()
	s := start(t, webhook.Config{URL: redirecting.URL, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Registerer: reg})
	s.Add(events(0, 3)...)
	require.Eventually(t, func() bool { return metric(t, reg, "presenced_webhook_events_sent_total") == 3 }, testWait, testPoll)
	assert.Equal(t, int32(2), posts.Load(), "POSTs to the webhook URL")
	assert.Equal(t, 3.0, metric(t, reg, "presenced_webhook_events_retried_total"))
	assert.Zero(t, elsewhere.count(), "requests that followed the redirect")
}
