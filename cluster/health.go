package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/lockorder"
)

// health follows whether Redis answers, from the outcome of every
// operation: the engine is ready while the last one succeeded. The writer
// counts recoveries, to renew at once after an outage and to hold claims
// back until it has.
type health struct {
	rdb redis.UniversalClient
	log *slog.Logger
	m   *metrics

	mu         lockorder.Mutex[lockorder.Health]
	down       bool
	recoveries uint64 // outages ended

	reading     chan struct{} // closed once Run runs: what was followed before, or is from now on, gets subscribed
	readingOnce sync.Once
}

func newHealth(rdb redis.UniversalClient, log *slog.Logger, m *metrics) *health {
	return &health{rdb: rdb, log: log, m: m, reading: make(chan struct{})}
}

// ping asks Redis whether it answers.
func (h *health) ping(ctx context.Context) error {
	if err := h.rdb.Ping(ctx).Err(); err != nil {
		h.fail("ping", err)
		return fmt.Errorf("cluster: redis unreachable: %w", err)
	}
	h.ok()
	return nil
}

// fail records a failed Redis operation; the first one after a success is
// logged.
func (h *health) fail(op string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	h.m.redisErrors.WithLabelValues(op).Inc()
	h.mu.Lock()
	was := h.down
	h.down = true
	h.mu.Unlock()
	if !was {
		h.m.redisUp.Set(0)
		h.log.Warn("cluster: redis unreachable; serving local clients, will reconcile when it returns", "op", op, "err", err)
	}
}

// ok records a successful Redis operation; after an outage it counts a
// recovery.
func (h *health) ok() {
	h.mu.Lock()
	was := h.down
	h.down = false
	if was {
		h.recoveries++
	}
	h.mu.Unlock()
	if was {
		h.m.redisUp.Set(1)
		h.log.Info("cluster: redis reachable again")
	}
}

func (h *health) isDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

// recovered returns how many outages have ended.
func (h *health) recovered() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.recoveries
}

// startedReading marks that Run runs: the topics followed before it are on
// their way to being subscribed, and those followed from now on will be.
func (h *health) startedReading() {
	h.readingOnce.Do(func() { close(h.reading) })
}
