package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/webhook"
)

// While the webhook's receiver is down for longer than its queue lasts,
// the outbox holds no more than the queue and the batch in flight: what
// the Sender drops leaves Redis as it is dropped, not after the next
// attempt, a backoff later. Once the receiver is back, what was kept
// reaches it once per id and leaves Redis too.
func TestOutboxBoundedDuringWebhookOutage(t *testing.T) {
	cases := []struct {
		name string
		// fail is how the receiver fails while it is down.
		fail func(w http.ResponseWriter, r *http.Request)
	}{
		{"answers 503", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }},
		// Longer than the Sender's timeout: the POST is cut off, never answered.
		{"hangs", func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const queue, batch, outage = 50, 20, 300
			h := startOutboxHook(t, webhook.Config{Queue: queue, MaxBatch: batch, Timeout: 500 * time.Millisecond,
				MinBackoff: 2 * time.Second, MaxBackoff: 2 * time.Second}, tc.fail)
			h.down.Store(true)

			// The batch in flight holds the first edge alone: it is made
			// before the Sender runs.
			h.node.SetUser("u0", 1, 0)
			h.waitMade(t, 1)
			h.run(t)
			require.Eventually(t, func() bool { return h.posts.Load() > 0 }, testWait, 10*time.Millisecond, "the first POST")

			// One edge at a time, each handed to the Sender before the next
			// is made, so that every edge in Redis is the Sender's to keep
			// or drop when the outbox is counted.
			peak := 0
			for i := 1; i <= outage; i++ {
				h.node.SetUser("u"+strconv.Itoa(i), 1, 0)
				h.waitMade(t, i+1)
				peak = max(peak, h.outboxSize(t))
			}
			t.Logf("outbox peak %d during the outage (queue %d, batch %d, %d edges)", peak, queue, batch, outage+1)
			assert.LessOrEqual(t, peak, queue+batch, "the outbox outgrew the queue and a batch")
			assert.Equal(t, float64(outage+1-queue-1), h.dropped(t), "dropped: all but the batch in flight and the queue")

			h.down.Store(false)
			made := h.made()
			want := append([]string{made[0]}, made[len(made)-queue:]...)
			require.Eventually(t, func() bool { return len(h.received()) >= len(want) }, testWait, 10*time.Millisecond,
				"the kept edges delivered")
			require.Eventually(t, func() bool { return h.outboxSize(t) == 0 && h.outboxEdges(t) == 0 }, testWait,
				10*time.Millisecond, "the outbox emptied")
			assert.Equal(t, want, h.received(), "the batch in flight, then the queue, each once")
		})
	}
}

// The outage figure: the receiver down for PRESENCED_OUTBOX_OUTAGE while
// edges arrive (see PRESENCED_OUTBOX_RATE below), with a 20,000 queue and
// the default batch and backoffs; it logs the outbox's peak.
func TestOutboxOutageFigure(t *testing.T) {
	env := os.Getenv("PRESENCED_OUTBOX_OUTAGE")
	if env == "" {
		t.Skip("set PRESENCED_OUTBOX_OUTAGE (e.g. 30s) to run")
	}
	outage, err := time.ParseDuration(env)
	require.NoError(t, err, "PRESENCED_OUTBOX_OUTAGE")
	const queue = 20_000
	h := startOutboxHook(t, webhook.Config{Queue: queue}, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	h.down.Store(true)
	h.run(t)

	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		c := time.NewTicker(50 * time.Millisecond)
		defer c.Stop()
		for {
			select {
			case <-stop:
				return
			case <-c.C:
			}
			if n, err := h.size(); err == nil && int64(n) > peak.Load() {
				peak.Store(int64(n))
			}
		}
	}()
	// Users flip online and offline, each flip an edge, PRESENCED_OUTBOX_RATE
	// a second in ticks of 100 ms, or a thousand at a time as fast as the
	// node writes them.
	rate := 0
	if env := os.Getenv("PRESENCED_OUTBOX_RATE"); env != "" {
		rate, err = strconv.Atoi(env)
		require.NoError(t, err, "PRESENCED_OUTBOX_RATE")
	}
	step := 1_000
	var tick <-chan time.Time
	if rate > 0 {
		step = max(1, rate/10)
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		tick = ticker.C
	}
	began := time.Now()
	on := 1
	for round := 0; time.Since(began) < outage; round++ {
		for i := range step {
			h.node.SetUser("u"+strconv.Itoa(i), on, 0)
		}
		on = 1 - on
		h.waitMade(t, (round+1)*step)
		if tick != nil {
			<-tick
		}
	}
	close(stop)
	<-sampled
	made := len(h.made())
	t.Logf("outage %v, queue %d: %d edges made (%.0f a second), %.0f dropped, outbox peak %d",
		outage, queue, made, float64(made)/time.Since(began).Seconds(), h.dropped(t), peak.Load())
}

// outboxHook is a node with the outbox on whose edges go to a webhook
// Sender, as presenced wires them, and the Sender's receiver.
type outboxHook struct {
	node   *node
	rdb    *redis.Client // the test's own, to count the outbox
	sender *webhook.Sender
	reg    *prometheus.Registry
	down   atomic.Bool // the receiver fails every POST
	posts  atomic.Int64

	mu  sync.Mutex
	ids []string // edges delivered, in order, repeats and all
}

// startOutboxHook starts the node and the receiver, which fails with fail
// while down, and makes the Sender from cfg (its URL, OnDone and
// Registerer set here); run starts its delivery.
func startOutboxHook(t *testing.T, cfg webhook.Config, fail http.HandlerFunc) *outboxHook {
	t.Helper()
	srv := startRedis(t)
	h := &outboxHook{rdb: srv.client(t), reg: prometheus.NewRegistry()}
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.posts.Add(1)
		if h.down.Load() {
			fail(w, r)
			return
		}
		var body struct{ Events []webhook.Event }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		for _, e := range body.Events {
			h.ids = append(h.ids, e.ID)
		}
		h.mu.Unlock()
	}))
	t.Cleanup(rc.Close)

	var engine *Engine
	cfg.URL, cfg.Registerer = rc.URL, h.reg
	cfg.OnDone = func(ids []string) {
		if err := engine.Delivered(context.Background(), ids); err != nil {
			t.Errorf("Delivered: %v", err)
		}
	}
	var err error
	h.sender, err = webhook.New(cfg)
	require.NoError(t, err)
	c := testConfig(srv.client(t), "a")
	c.Outbox = true
	h.node = startNodeRelay(t, c, func(e *Engine, rec *recorder) presence.Relay {
		engine = e
		return hookRelay{rec, h.sender}
	})
	return h
}

// run starts the Sender's delivery until the test ends.
func (h *outboxHook) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.sender.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// hookRelay hands each edge the node makes to the Sender before the
// recorder hears it.
type hookRelay struct {
	*recorder
	sender *webhook.Sender
}

func (r hookRelay) Receive(e presence.Event) {
	if e.Kind == presence.EventProduced {
		r.sender.AddEdges([]presence.Edge{e.Edge})
	}
	r.recorder.Receive(e)
}

// waitMade waits until the node made n edges.
func (h *outboxHook) waitMade(t *testing.T, n int) {
	t.Helper()
	h.node.rec.waitFor(t, testWait, strconv.Itoa(n)+" edges made", func() bool {
		h.node.rec.mu.Lock()
		defer h.node.rec.mu.Unlock()
		return len(h.node.rec.made) >= n
	})
}

// made returns the IDs of the edges the node made, in order.
func (h *outboxHook) made() []string {
	h.node.rec.mu.Lock()
	defer h.node.rec.mu.Unlock()
	ids := make([]string, len(h.node.rec.made))
	for i, e := range h.node.rec.made {
		ids[i] = e.ID
	}
	return ids
}

// received returns the IDs the receiver took, in order, repeats and all.
func (h *outboxHook) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...)
}

// outboxSize is how many edges the outbox keeps, over every shard (T:ob).
func (h *outboxHook) outboxSize(t *testing.T) int {
	n, err := h.size()
	require.NoError(t, err)
	return n
}

func (h *outboxHook) size() (int, error) {
	n := 0
	for _, k := range h.node.keys {
		ob, _ := k.outboxKeys()
		c, err := h.rdb.ZCard(context.Background(), ob).Result()
		if err != nil {
			return 0, err
		}
		n += int(c)
	}
	return n, nil
}

// outboxEdges is how many edges T:oe holds, over every shard.
func (h *outboxHook) outboxEdges(t *testing.T) int {
	n := 0
	for _, k := range h.node.keys {
		_, oe := k.outboxKeys()
		c, err := h.rdb.HLen(context.Background(), oe).Result()
		require.NoError(t, err)
		n += int(c)
	}
	return n
}

// dropped reads the Sender's events_dropped_total.
func (h *outboxHook) dropped(t *testing.T) float64 {
	mfs, err := h.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "presenced_webhook_events_dropped_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
