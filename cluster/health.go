package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/lockorder"
)

// health follows whether Redis answers, from the outcome of every
// operation, whether this node's own writes land, and whether each shard it
// follows can be heard. The engine is ready while the last operation
// succeeded, the last write landed and no followed shard is deaf. The writer
// counts recoveries, to renew at once after an outage and to hold claims
// back until it has.
type health struct {
	rdb redis.UniversalClient
	log *slog.Logger
	m   *metrics

	mu         lockorder.Mutex[lockorder.Health]
	down       bool
	upSince    time.Time // when the last outage ended, or the first operation succeeded
	recoveries uint64    // outages ended
	// unwritten is why this node's last write failed; nil once one lands.
	// A Redis Cluster answers a ping on one master while the master of
	// another shard is gone, so a ping alone does not tell readiness.
	unwritten error
	// deaf holds the shards whose subscription was lost and not yet
	// confirmed again, with why and since when: their edges do not reach
	// this node meanwhile.
	deaf map[int]deafness

	reading     chan struct{} // closed once Run runs: what was followed before, or is from now on, gets subscribed
	readingOnce sync.Once
}

// deafness is why and since when a shard's subscription is lost.
type deafness struct {
	err   error
	since time.Time
}

func newHealth(rdb redis.UniversalClient, log *slog.Logger, m *metrics) *health {
	return &health{rdb: rdb, log: log, m: m, reading: make(chan struct{}), deaf: map[int]deafness{}}
}

// ready reports why the engine is not ready: Redis does not answer a ping,
// this node's last write failed, or a followed shard cannot be heard.
func (h *health) ready(ctx context.Context) error {
	if err := h.ping(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unwritten != nil {
		return fmt.Errorf("cluster: redis does not take this node's writes: %w", h.unwritten)
	}
	if len(h.deaf) == 0 {
		return nil
	}
	shard := slices.Min(slices.Collect(maps.Keys(h.deaf)))
	d := h.deaf[shard]
	return fmt.Errorf("cluster: cannot hear %d shard(s) of the followed topics, shard %d since %s: %w",
		len(h.deaf), shard, d.since.Format(time.RFC3339), d.err)
}

// wrote records the outcome of one of this node's writes.
func (h *health) wrote(err error) {
	h.mu.Lock()
	h.unwritten = err
	h.mu.Unlock()
	h.gauge()
}

// lost records that shard's subscription was lost; it reports whether the
// shard was heard until now, so the caller logs a loss once.
func (h *health) lost(shard int, err error) bool {
	h.mu.Lock()
	_, was := h.deaf[shard]
	if !was {
		h.deaf[shard] = deafness{err: err, since: time.Now()}
	}
	h.mu.Unlock()
	if !was {
		h.m.subscriptionsLost.Inc()
		h.gauge()
	}
	return !was
}

// heard records that Redis confirmed shard's subscription; it returns how
// long the shard was deaf, 0 if it was not.
func (h *health) heard(shard int) time.Duration {
	h.mu.Lock()
	d, was := h.deaf[shard]
	delete(h.deaf, shard)
	h.mu.Unlock()
	if !was {
		return 0
	}
	h.gauge()
	return max(time.Since(d.since), time.Nanosecond)
}

// gauge sets redis_up from the state: 1 only while Redis answers, takes
// this node's writes and every followed shard is heard.
func (h *health) gauge() {
	h.mu.Lock()
	up := !h.down && h.unwritten == nil && len(h.deaf) == 0
	h.mu.Unlock()
	if up {
		h.m.redisUp.Set(1)
	} else {
		h.m.redisUp.Set(0)
	}
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
		h.gauge()
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
	if was || h.upSince.IsZero() {
		h.upSince = time.Now()
	}
	h.mu.Unlock()
	if was {
		h.gauge()
		h.log.Info("cluster: redis reachable again")
	}
}

// answering returns since when Redis has answered this node's operations
// without a failure; zero while it does not, or before the first.
func (h *health) answering() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		return time.Time{}
	}
	return h.upSince
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
