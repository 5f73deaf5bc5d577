package webhook_test

import (
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/webhook"
)

// While the backend answers 503, events past the queue are dropped, oldest
// first, counted and logged; once it is back it gets the rest in order.
func TestOutageDropsOldest(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	rc := newReceiver(t, func(int, *http.Request) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	reg := prometheus.NewRegistry()
	var logs presencedtest.SyncBuffer
	s := start(t, webhook.Config{URL: rc.URL, Queue: 2_000, MaxBatch: 500, MinBackoff: time.Millisecond,
		MaxBackoff: 20 * time.Millisecond, Registerer: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	evs := events(0, 5_100)
	s.Add(evs[:100]...)
	// The first batch is now being delivered, held apart from the queue.
	require.Eventually(t, func() bool { return rc.count() >= 2 }, testWait, testPoll, "a POST and a retry")
	for i := 100; i < len(evs); i += 1_000 { // one tick's edges at a time
		s.Add(evs[i : i+1_000]...)
	}
	// 5,000 queued behind the batch, 2,000 fit: the 3,000 oldest went.
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP presenced_webhook_events_dropped_total Events never sent: the oldest waiting ones, dropped when the queue was full.
# TYPE presenced_webhook_events_dropped_total counter
presenced_webhook_events_dropped_total 3000
# HELP presenced_webhook_queue_length Events waiting to be sent, not counting the batch being delivered.
# TYPE presenced_webhook_queue_length gauge
presenced_webhook_queue_length 2000
`), "presenced_webhook_events_dropped_total", "presenced_webhook_queue_length"))

	down.Store(false)
	want := append(evs[:100:100], evs[3_100:]...)
	requireSame(t, want, rc.waitDelivered(t, len(want), false))
	assert.Equal(t, 3_000.0, metric(t, reg, "presenced_webhook_events_dropped_total"))
	assert.Zero(t, metric(t, reg, "presenced_webhook_queue_length"))

	// Every drop is in some line, and the line written when delivery
	// resumed has the total; a few lines, not one per event or per Add.
	dropped := regexp.MustCompile(`msg="webhook: queue full, dropped the oldest events" .* dropped=(\d+) dropped_total=(\d+)`)
	var lines [][]string
	require.Eventually(t, func() bool {
		lines = dropped.FindAllStringSubmatch(logs.String(), -1)
		sum := 0
		for _, l := range lines {
			n, _ := strconv.Atoi(l[1])
			sum += n
		}
		return sum == 3_000
	}, testWait, testPoll, "drops logged:\n%s", logs.String())
	assert.Equal(t, "3000", lines[len(lines)-1][2], "dropped_total of the last line")
	assert.LessOrEqual(t, len(lines), 2, "drop lines:\n%s", logs.String())
}

// A backend whose listener closed refuses connections; when it listens again
// on the same address it gets what fit the queue, in order.
func TestOutageListenerClosed(t *testing.T) {
	first := newReceiver(t, nil)
	addr := first.Listener.Addr().String()
	reg := prometheus.NewRegistry()
	s := start(t, webhook.Config{URL: first.URL, Queue: 500, MaxBatch: 100, MinBackoff: time.Millisecond,
		MaxBackoff: 20 * time.Millisecond, Registerer: reg})
	evs := events(0, 2_000)
	s.Add(evs[:10]...)
	requireSame(t, evs[:10], first.waitDelivered(t, 10, false))

	first.Close()
	s.Add(evs[10:20]...)
	require.Eventually(t, func() bool { return metric(t, reg, "presenced_webhook_events_retried_total") >= 10 },
		testWait, testPoll, "a refused POST retried")
	s.Add(evs[20:]...)
	assert.Equal(t, 1_480.0, metric(t, reg, "presenced_webhook_events_dropped_total"))

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again (taken meanwhile?): %v", addr, err)
	}
	second := newReceiverOn(t, l, nil)
	want := append(evs[10:20:20], evs[1_500:]...)
	requireSame(t, want, second.waitDelivered(t, len(want), false))
}

// Add returns while a POST hangs, whatever it adds: it never waits on the
// network or on Run.
func TestAddNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, hang(release, nil, 0))
	reg := prometheus.NewRegistry()
	s := start(t, webhook.Config{URL: rc.URL, Timeout: time.Minute, MinBackoff: time.Millisecond,
		MaxBackoff: 10 * time.Millisecond, Registerer: reg})
	evs := events(0, 100_110)
	s.Add(evs[:10]...)
	require.Eventually(t, func() bool { return rc.count() == 1 }, testWait, testPoll, "the POST that hangs")

	added := make(chan struct{})
	go func() {
		defer close(added)
		for i := 10; i < len(evs); i += 1_000 {
			s.Add(evs[i:min(i+1_000, len(evs))]...)
		}
	}()
	select {
	case <-added:
	case <-time.After(testWait):
		close(release)
		require.Fail(t, "Add blocked while a POST hung")
	}
	assert.Equal(t, 1, rc.count(), "the POST hangs still")
	assert.Equal(t, 100_000.0, metric(t, reg, "presenced_webhook_queue_length"))
	assert.Equal(t, 100.0, metric(t, reg, "presenced_webhook_events_dropped_total"))

	close(release) // the hung POST is answered 500 and sent again
	want := append(evs[:10:10], evs[110:]...)
	// 100,000 events to encode, sign and decode take seconds of CPU under
	// -race, and a busy machine gives the test a fraction of a core.
	requireSame(t, want, rc.waitDeliveredFor(t, len(want), false, time.Minute))
}

// The outage figure: the backend down for PRESENCED_WEBHOOK_OUTAGE while
// 10,000 events a second arrive, with the default queue and backoffs.
func TestOutageFigure(t *testing.T) {
	env := os.Getenv("PRESENCED_WEBHOOK_OUTAGE")
	if env == "" {
		t.Skip("set PRESENCED_WEBHOOK_OUTAGE (e.g. 30s) to run")
	}
	outage, err := time.ParseDuration(env)
	require.NoError(t, err, "PRESENCED_WEBHOOK_OUTAGE")
	const perSecond = 10_000

	var down atomic.Bool
	down.Store(true)
	rc := newReceiver(t, func(int, *http.Request) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	reg := prometheus.NewRegistry()
	var logs presencedtest.SyncBuffer
	s := start(t, webhook.Config{URL: rc.URL, Registerer: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	// One tick's edges a second, as the presence node hands them over.
	began := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	added := 0
	for time.Since(began) < outage {
		s.Add(events(added, perSecond)...)
		added += perSecond
		<-tick.C
	}
	down.Store(false)
	back := time.Now()
	dropped := int(metric(t, reg, "presenced_webhook_events_dropped_total"))
	want := added - dropped
	// The last retry may be MaxBackoff (30 s) after the backend came back.
	got := rc.waitDeliveredFor(t, want, false, 2*time.Minute)
	drained := time.Since(back)

	inOrder := 0
	for i := 1; i < len(got); i++ {
		if got[i].At > got[i-1].At {
			inOrder++
		}
	}
	batches := 0
	for _, r := range rc.requests() {
		if r.status == http.StatusOK {
			batches++
		}
	}
	t.Logf("outage %v: %d added, %d arrived (%d after the one before), %d dropped, %d batches of %d POSTs; drained %v after the backend came back",
		outage, added, len(got), inOrder+1, dropped, batches, rc.count(), drained.Round(time.Millisecond))
	t.Logf("log:\n%s", logs.String())
	assert.Equal(t, len(got)-1, inOrder, "events out of order")
	assert.Equal(t, added, len(got)+dropped, "arrived + dropped")
}
