// Package cluster shares presence between several presenced nodes through
// Redis (single server, Sentinel or Cluster, via go-redis's UniversalClient).
//
// Each node keeps its own ring for its own connections and holds one lease per
// user it has online: a member of a sorted set scored by the lease's expiry.
// Leases are renewed in pipelined batches a few times per timeout, never on a
// keepalive. Lua scripts change leases atomically and write every presence
// edge (a user's first lease appears, its last one goes) to a Redis Stream;
// every node reads the streams and relays the edges to its own clients. A node
// that dies stops renewing; the first live node to claim its expired leases
// emits the offline edges, each exactly once.
//
// All keys of a shard share one hash tag, so every script touches one cluster
// slot. Nodes that share users must use the same Prefix and Shards.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
)

var _ presence.Engine = (*Engine)(nil)

// Config configures an Engine. Client is required; the rest has defaults.
type Config struct {
	// Client reaches Redis: *redis.Client, a Sentinel-backed failover client or
	// *redis.ClusterClient. In Cluster mode the engine keeps one blocking
	// stream read per shard, so the pool needs PoolSize >= Shards + 10.
	Client redis.UniversalClient
	// Node names this process; unique among live nodes, without '|'.
	// Empty means hostname-pid.
	Node string
	// Prefix starts every key; default "presenced".
	Prefix string
	// Shards is the number of lease sets and event streams; default 16.
	Shards int
	// Timeout is a lease's lifetime: a node that stops renewing (crashed, cut
	// off) has its users taken offline within about Timeout. Default 30s.
	Timeout time.Duration
	// RenewEvery is how often all leases are renewed; default Timeout/3.
	RenewEvery time.Duration
	// ClaimEvery is how often this node looks for expired leases; default
	// Timeout/6, at most (Timeout-RenewEvery)/3.
	ClaimEvery time.Duration
	// Batch is the most leases one script call handles; default 500, at most 2000.
	Batch int
	// StreamMaxLen trims each event stream to about this many entries; default 10000.
	StreamMaxLen int64
	// Logger receives warnings about Redis; nil discards.
	Logger *slog.Logger
	// Registerer receives the engine's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Engine implements presence.Engine on Redis. Create it with New, hand it to
// the transport Hub (which calls Run), and call Close on shutdown to drop this
// node's leases at once.
//
// Users' presence, chat, publish and send span the nodes; channel
// membership (snapshots, diffs, member lists) is counted per node.
type Engine struct {
	cfg       Config
	rdb       redis.UniversalClient
	log       *slog.Logger
	m         *metrics
	keys      []shardKeys
	shardOf   map[string]int // events stream key -> shard
	chat      string
	isCluster bool
	block     time.Duration // XREAD BLOCK, bounds how long Run takes to notice ctx
	retry     time.Duration // pause after a failed Redis operation

	mu       sync.Mutex
	pending  map[string]int // uid -> latest local connection count not yet in Redis
	inflight int            // changes taken from pending and not yet confirmed
	closed   bool

	wake       chan struct{}
	resync     chan struct{} // asks Run to reconcile its view with Redis
	stop       context.CancelFunc
	writerDone chan struct{}
	held       map[string]int // uid -> connections in this node's lease; owned by the writer

	stateMu    sync.Mutex
	down       bool
	recoveries atomic.Uint64

	// memberMu orders membership edges, held while calling relay.
	memberMu sync.Mutex
	members  map[membership]struct{}
	relay    presence.Relay

	running   atomic.Bool
	ready     chan struct{} // closed when Run first has loaded its view and subscribed
	readyOnce sync.Once
	closeOnce sync.Once
	closeErr  error
}

// New validates cfg and starts the goroutine that writes this node's leases.
// It does not contact Redis: a node starts, and serves its own clients, while
// Redis is unreachable.
func New(cfg Config) (*Engine, error) {
	if cfg.Client == nil {
		return nil, errors.New("cluster: Config.Client is nil")
	}
	if cfg.Node == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "node"
		}
		cfg.Node = host + "-" + strconv.Itoa(os.Getpid())
	}
	if strings.Contains(cfg.Node, "|") {
		return nil, fmt.Errorf("cluster: node name %q contains '|'", cfg.Node)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "presenced"
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("cluster: prefix %q contains a brace", cfg.Prefix)
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.RenewEvery == 0 {
		cfg.RenewEvery = cfg.Timeout / 3
	}
	if cfg.ClaimEvery == 0 {
		cfg.ClaimEvery = cfg.Timeout / 6
	}
	if cfg.Batch == 0 {
		cfg.Batch = 500
	}
	if cfg.StreamMaxLen == 0 {
		cfg.StreamMaxLen = 10000
	}
	switch {
	case cfg.Shards < 1 || cfg.Shards > 4096:
		return nil, fmt.Errorf("cluster: Shards %d out of range 1..4096", cfg.Shards)
	case cfg.Timeout < 10*time.Millisecond:
		return nil, fmt.Errorf("cluster: Timeout %v too short", cfg.Timeout)
	case cfg.RenewEvery <= 0 || cfg.RenewEvery > cfg.Timeout/2:
		return nil, fmt.Errorf("cluster: RenewEvery %v must be in (0, Timeout/2]", cfg.RenewEvery)
	case cfg.ClaimEvery <= 0 || cfg.ClaimEvery > (cfg.Timeout-cfg.RenewEvery)/3:
		// Claims pause after a gap of (Timeout-RenewEvery)/2 without one.
		return nil, fmt.Errorf("cluster: ClaimEvery %v must be in (0, (Timeout-RenewEvery)/3]", cfg.ClaimEvery)
	case cfg.Batch < 1 || cfg.Batch > 2000:
		// A renewal unpacks 2*Batch values onto the Lua stack.
		return nil, fmt.Errorf("cluster: Batch %d out of range 1..2000", cfg.Batch)
	case cfg.StreamMaxLen < 1:
		return nil, fmt.Errorf("cluster: StreamMaxLen %d must be positive", cfg.StreamMaxLen)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("cluster: register metrics: %w", err)
	}
	e := &Engine{
		cfg:        cfg,
		rdb:        cfg.Client,
		log:        log.With("node", cfg.Node),
		m:          m,
		shardOf:    make(map[string]int, cfg.Shards),
		chat:       cfg.Prefix + ":chat",
		block:      min(time.Second, cfg.RenewEvery),
		retry:      min(max(cfg.RenewEvery/4, 10*time.Millisecond), time.Second),
		pending:    make(map[string]int),
		members:    make(map[membership]struct{}),
		wake:       make(chan struct{}, 1),
		resync:     make(chan struct{}, 1),
		writerDone: make(chan struct{}),
		held:       make(map[string]int),
		ready:      make(chan struct{}),
	}
	_, e.isCluster = cfg.Client.(*redis.ClusterClient)
	for i := range cfg.Shards {
		k := newShardKeys(cfg.Prefix, i)
		e.keys = append(e.keys, k)
		e.shardOf[k.events] = i
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	go e.writeLoop(ctx)
	return e, nil
}

// Node returns this node's name.
func (e *Engine) Node() string { return e.cfg.Node }

func (e *Engine) shard(uid string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return int(h.Sum32() % uint32(len(e.keys)))
}

// SetUser records that this node holds n connections for uid. It never
// blocks on Redis: changes are coalesced per user and written in batches.
func (e *Engine) SetUser(uid string, n int) {
	if n < 0 {
		n = 0
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.pending[uid] = n
	e.m.pending.Set(float64(len(e.pending) + e.inflight))
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// SetMember records that n of this node's connections of uid joined
// channel, and tells this node's Relay of a join or leave edge. Membership
// is counted per node: other nodes do not hear of it.
func (e *Engine) SetMember(channel, uid string, n int) {
	e.memberMu.Lock()
	defer e.memberMu.Unlock()
	k := membership{channel, uid}
	_, was := e.members[k]
	if n > 0 {
		e.members[k] = struct{}{}
	} else {
		delete(e.members, k)
	}
	if r := e.relay; r != nil && was != (n > 0) {
		r.MemberChanged(channel, uid, n > 0)
	}
}

type membership struct{ channel, uid string }

// attach hands r this node's memberships and the ones that follow.
func (e *Engine) attach(r presence.Relay) {
	e.memberMu.Lock()
	defer e.memberMu.Unlock()
	e.relay = r
	for k := range e.members {
		r.MemberChanged(k.channel, k.uid, true)
	}
}

// User returns uid's connections summed over all nodes.
func (e *Engine) User(ctx context.Context, uid string) (int, error) {
	n, err := e.rdb.HGet(ctx, e.keys[e.shard(uid)].conns, uid).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		e.fail("lookup", err)
		return 0, fmt.Errorf("cluster: look up %q: %w", uid, err)
	}
	e.ok()
	return n, nil
}

// Users returns how many users are online on any node and the first limit of
// their IDs in ascending order.
func (e *Engine) Users(ctx context.Context, limit int) (int, []string, error) {
	pipe := e.rdb.Pipeline()
	cards := make([]*redis.IntCmd, len(e.keys))
	ranges := make([]*redis.StringSliceCmd, len(e.keys))
	for i, k := range e.keys {
		cards[i] = pipe.ZCard(ctx, k.online)
		if limit > 0 {
			ranges[i] = pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: k.online, Start: "-", Stop: "+", ByLex: true, Count: int64(limit)})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.fail("users", err)
		return 0, nil, fmt.Errorf("cluster: list users: %w", err)
	}
	e.ok()
	count := 0
	var users []string
	for i := range e.keys {
		count += int(cards[i].Val())
		if limit > 0 {
			users = append(users, ranges[i].Val()...)
		}
	}
	if limit <= 0 {
		return count, nil, nil
	}
	sort.Strings(users)
	if len(users) > limit {
		users = users[:limit]
	}
	return count, users, nil
}

// wireMessage is a presence.Message on Pub/Sub; its frame is JSON already.
type wireMessage struct {
	Channel string          `json:"c,omitempty"`
	UID     string          `json:"u,omitempty"`
	Frame   json.RawMessage `json:"f"`
}

// Publish sends m to the clients of every node through Redis Pub/Sub.
func (e *Engine) Publish(ctx context.Context, m presence.Message) error {
	msg, err := json.Marshal(wireMessage{m.Channel, m.UID, m.Frame})
	if err != nil {
		return fmt.Errorf("cluster: publish: %w", err)
	}
	if err := e.rdb.Publish(ctx, e.chat, msg).Err(); err != nil {
		e.fail("publish", err)
		return fmt.Errorf("cluster: publish: %w", err)
	}
	e.ok()
	return nil
}

// Health pings Redis.
func (e *Engine) Health(ctx context.Context) error {
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		e.fail("ping", err)
		return fmt.Errorf("cluster: redis unreachable: %w", err)
	}
	e.ok()
	return nil
}

// Close stops writing leases and drops every lease this node holds, so its
// users go offline at once (those also on another node stay online). It does
// not close the Redis client. Safe to call more than once.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.stop()
		<-e.writerDone
		e.mu.Lock()
		e.closed = true
		drop := make(map[string]int, len(e.held)+len(e.pending))
		for uid := range e.pending {
			drop[uid] = 0
		}
		e.pending = map[string]int{}
		e.mu.Unlock()
		for uid := range e.held {
			drop[uid] = 0
		}
		if err := e.apply(ctx, drop, false); err != nil {
			e.closeErr = fmt.Errorf("cluster: drop leases of %s on close: %w", e.cfg.Node, err)
		}
	})
	return e.closeErr
}

// fail records a failed Redis operation; the first one after a success is logged.
func (e *Engine) fail(op string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	e.m.redisErrors.WithLabelValues(op).Inc()
	e.stateMu.Lock()
	was := e.down
	e.down = true
	e.stateMu.Unlock()
	if !was {
		e.m.redisUp.Set(0)
		e.log.Warn("cluster: redis unreachable; serving local clients, will reconcile when it returns", "op", op, "err", err)
	}
}

func (e *Engine) isDown() bool {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	return e.down
}

// ok records a successful Redis operation; after an outage it counts a recovery.
func (e *Engine) ok() {
	e.stateMu.Lock()
	was := e.down
	e.down = false
	if was {
		e.recoveries.Add(1)
	}
	e.stateMu.Unlock()
	if was {
		e.m.redisUp.Set(1)
		e.log.Info("cluster: redis reachable again")
	}
}
