// Package cluster shares presence between several presenced nodes through
// Redis (single server, Sentinel or Cluster, via go-redis's UniversalClient).
//
// Each node keeps its own ring for its own connections: a keepalive never
// touches Redis. What a node holds (its users' connection counts and their
// channel memberships) is written to Redis only when it changes, coalesced
// and batched; the node proves it is alive with one liveness entry per shard,
// renewed a few times per timeout, so Redis's steady-state work does not grow
// with the number of users. Lua scripts change the records atomically and
// publish each edge (a user's first node arrives or its last goes; a user's
// first membership of a channel appears or its last goes) on a sharded
// Pub/Sub channel of that user or channel. A node subscribes only to the
// channels and users its own connections follow. A node that dies stops
// renewing; the first live node to claim its shards reaps its records and
// emits their edges, each exactly once.
//
// All keys of a shard share one hash tag, so every script touches one cluster
// slot. Nodes that share presence must use the same Prefix and Shards.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

var _ presence.Router = (*Engine)(nil)

// Config configures an Engine. Client is required; the rest has defaults.
type Config struct {
	// Client reaches Redis: *redis.Client, a Sentinel-backed failover client or
	// *redis.ClusterClient. The engine keeps one Pub/Sub connection per shard
	// that its clients follow.
	Client redis.UniversalClient
	// Node names this process; unique among live nodes, without '|', ' ',
	// '{' or '}'. Empty means hostname-pid.
	Node string
	// Prefix starts every key; default "presenced".
	Prefix string
	// Shards is the number of hash tags users and channels spread over;
	// default 16.
	Shards int
	// Timeout is how long a node may go without renewing before others take
	// it for dead and its users leave: within about Timeout. Default 30s.
	Timeout time.Duration
	// RenewEvery is how often this node renews its liveness; default Timeout/3.
	RenewEvery time.Duration
	// ClaimEvery is how often this node looks for dead nodes; default
	// Timeout/6, at most (Timeout-RenewEvery)/3.
	ClaimEvery time.Duration
	// Batch is the most records one script call writes or reaps; default 500,
	// at most 2000.
	Batch int
	// Logger receives warnings about Redis; nil discards.
	Logger *slog.Logger
	// Registerer receives the engine's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Engine implements presence.Engine, as a presence.Router, on Redis. Create
// it with New, hand it to the transport Hub (which calls Run), and call
// Close on shutdown to drop this node's records at once.
type Engine struct {
	cfg   Config
	rdb   redis.UniversalClient
	log   *slog.Logger
	m     *metrics
	keys  []shardKeys
	retry time.Duration // pause after a failed Redis operation

	// The writer's input: changes not yet in Redis, coalesced.
	mu             sync.Mutex
	pendingUsers   map[string]int // uid -> connections on this node
	pendingMembers map[membership]bool
	inflight       int
	// What this node holds now, written or not: a live node's own users are
	// online, and members of the channels they joined, whatever Redis says
	// before its writes land.
	localUsers   map[string]int
	localMembers map[string]map[string]struct{} // channel -> uids
	closed       bool
	wake         chan struct{}

	// Owned by the writer goroutine: what Redis holds for this node.
	heldUsers   map[string]int
	heldMembers map[membership]struct{}

	stop       context.CancelFunc
	writerDone chan struct{}

	relay atomic.Pointer[relayBox]

	// The router: topics this node follows, their Pub/Sub subscriptions.
	fmu    sync.Mutex
	topics map[string]*topicState // by Pub/Sub channel name
	run    *runState              // while Run runs
	subs   []*redis.PubSub        // by shard, while Run runs; nil until a topic needs one

	stateMu    sync.Mutex
	down       bool
	recoveries atomic.Uint64

	running   atomic.Bool
	ready     chan struct{} // closed when Run first subscribed
	readyOnce sync.Once
	closeOnce sync.Once
	closeErr  error
}

type relayBox struct{ presence.Relay }

type membership struct{ channel, uid string }

// New validates cfg and starts the goroutine that writes this node's records.
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
	if strings.ContainsAny(cfg.Node, "| {}") {
		return nil, fmt.Errorf("cluster: node name %q contains '|', a space or a brace", cfg.Node)
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
		return nil, fmt.Errorf("cluster: Batch %d out of range 1..2000", cfg.Batch)
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
		cfg:            cfg,
		rdb:            cfg.Client,
		log:            log.With("node", cfg.Node),
		m:              m,
		retry:          min(max(cfg.RenewEvery/4, 10*time.Millisecond), time.Second),
		pendingUsers:   make(map[string]int),
		pendingMembers: make(map[membership]bool),
		localUsers:     make(map[string]int),
		localMembers:   make(map[string]map[string]struct{}),
		wake:           make(chan struct{}, 1),
		heldUsers:      make(map[string]int),
		heldMembers:    make(map[membership]struct{}),
		writerDone:     make(chan struct{}),
		topics:         make(map[string]*topicState),
		ready:          make(chan struct{}),
	}
	for i := range cfg.Shards {
		e.keys = append(e.keys, newShardKeys(cfg.Prefix, i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	go e.writeLoop(ctx)
	return e, nil
}

// Node returns this node's name.
func (e *Engine) Node() string { return e.cfg.Node }

func (e *Engine) shard(name string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % uint32(len(e.keys)))
}

// SetUser records that this node holds n connections for uid. It never
// blocks on Redis: changes are coalesced and written in batches.
func (e *Engine) SetUser(uid string, n int) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.pendingUsers[uid] = max(n, 0)
	if n > 0 {
		e.localUsers[uid] = n
	} else {
		delete(e.localUsers, uid)
	}
	e.changedLocked()
	if n > 0 {
		e.relayOwn(presence.Topic{UID: uid}, func(r presence.Relay) { r.UserChanged(uid, true) })
	}
}

// SetMember records that n of this node's connections of uid joined channel.
func (e *Engine) SetMember(channel, uid string, n int) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.pendingMembers[membership{channel, uid}] = n > 0
	if n > 0 {
		if e.localMembers[channel] == nil {
			e.localMembers[channel] = make(map[string]struct{})
		}
		e.localMembers[channel][uid] = struct{}{}
	} else if m := e.localMembers[channel]; m != nil {
		delete(m, uid)
		if len(m) == 0 {
			delete(e.localMembers, channel)
		}
	}
	e.changedLocked()
	if n > 0 {
		e.relayOwn(presence.Topic{Channel: channel}, func(r presence.Relay) { r.MemberChanged(channel, uid, true) })
	}
}

// relayOwn tells the Relay at once of this node's own user or membership
// arriving, if it follows the topic: the edge from Redis follows, a
// duplicate the Relay ignores.
func (e *Engine) relayOwn(t presence.Topic, tell func(presence.Relay)) {
	r := e.relay.Load()
	if r == nil {
		return
	}
	e.fmu.Lock()
	defer e.fmu.Unlock()
	if ts := e.topics[e.topicName(t)]; ts != nil && ts.loaded {
		tell(r)
	}
}

// holds reports whether this node holds uid, or uid's membership of channel.
func (e *Engine) holds(channel, uid string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if channel == "" {
		return e.localUsers[uid] > 0
	}
	_, ok := e.localMembers[channel][uid]
	return ok
}

// changedLocked wakes the writer and unlocks e.mu.
func (e *Engine) changedLocked() {
	e.m.pending.Set(float64(len(e.pendingUsers) + len(e.pendingMembers) + e.inflight))
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
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
	return e.listing(ctx, "users", func(k shardKeys) string { return k.online }, e.keys, limit)
}

// Members returns how many members channel has on any node and the first
// limit of their IDs in ascending order.
func (e *Engine) Members(ctx context.Context, channel string, limit int) (int, []string, error) {
	k := e.keys[e.shard(channel)]
	return e.listing(ctx, "members", func(k shardKeys) string { return k.members(channel) }, []shardKeys{k}, limit)
}

// listing counts and lists, in order, the sorted sets named by key in shards.
func (e *Engine) listing(ctx context.Context, op string, key func(shardKeys) string, shards []shardKeys, limit int) (int, []string, error) {
	pipe := e.rdb.Pipeline()
	cards := make([]*redis.IntCmd, len(shards))
	ranges := make([]*redis.StringSliceCmd, len(shards))
	for i, k := range shards {
		cards[i] = pipe.ZCard(ctx, key(k))
		if limit > 0 {
			ranges[i] = pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: key(k), Start: "-", Stop: "+", ByLex: true, Count: int64(limit)})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.fail(op, err)
		return 0, nil, fmt.Errorf("cluster: list %s: %w", op, err)
	}
	e.ok()
	count := 0
	var list []string
	for i := range shards {
		count += int(cards[i].Val())
		if limit > 0 {
			list = append(list, ranges[i].Val()...)
		}
	}
	if limit <= 0 {
		return count, nil, nil
	}
	if list == nil {
		list = []string{}
	}
	sort.Strings(list)
	if len(list) > limit {
		list = list[:limit]
	}
	return count, list, nil
}

// wireMessage is a presence.Message on Pub/Sub; its frame is JSON already.
type wireMessage struct {
	Frame      json.RawMessage `json:"f,omitempty"`
	Disconnect int             `json:"x,omitempty"`
}

// Publish sends m to the followers of its channel or user, on every node,
// at most once. An error means it was not delivered: a call whose answer
// was lost (Redis stalled, the connection broke) is cancelled by its ID
// before Publish gives up, and if the cancellation finds it already
// published, Publish reports success. The cancellation is retried until
// Redis answers it, for at most the ID's lifetime, so Publish may outlast
// ctx while Redis is stalled.
func (e *Engine) Publish(ctx context.Context, m presence.Message) error {
	w := wireMessage{Frame: m.Frame}
	topic := presence.Topic{UID: m.UID}
	if m.Disconnect {
		w = wireMessage{Disconnect: 1}
	}
	if m.Channel != "" {
		topic = presence.Topic{Channel: m.Channel}
	}
	msg, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("cluster: publish: %w", err)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	k := e.keys[e.topicShard(topic)]
	idKey := k.msg(hex.EncodeToString(b[:]))
	life := (2 * e.cfg.Timeout).Milliseconds()
	err = publishScript.Run(ctx, e.rdb, []string{idKey}, e.topicName(topic), msg, life).Err()
	if err == nil {
		e.ok()
		return nil
	}
	e.fail("publish", err)
	// The call may still run, or have run: take its ID first, so it
	// publishes nothing if it has not, and learn which it was.
	cctx, cancel := context.WithTimeout(context.Background(), 2*e.cfg.Timeout)
	defer cancel()
	for {
		taken, cerr := e.rdb.SetNX(cctx, idKey, "0", 2*e.cfg.Timeout).Result()
		if cerr == nil {
			if !taken {
				return nil // it was published
			}
			return fmt.Errorf("cluster: publish: %w", err)
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("cluster: publish: not confirmed: %w (cancelling it: %w)", err, cerr)
		case <-time.After(e.retry):
		}
	}
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

// Close stops writing and drops every record this node holds, so its users
// leave their channels and go offline at once (those also on another node
// stay). It does not close the Redis client. Safe to call more than once.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.stop()
		<-e.writerDone
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		e.closeErr = e.leave(ctx)
	})
	return e.closeErr
}

// leave reaps this node's own records in every shard.
func (e *Engine) leave(ctx context.Context) error {
	shards := make([]int, len(e.keys))
	for i := range shards {
		shards[i] = i
	}
	for len(shards) > 0 {
		calls := make([]scriptCall, len(shards))
		for i, s := range shards {
			calls[i] = scriptCall{shard: s, args: []any{e.keys[s].tag, e.cfg.Node, e.cfg.Batch}}
		}
		var more []int
		for i, cmd := range e.runScripts(ctx, leaveScript, calls) {
			res, err := scriptResult(cmd, 1)
			if err != nil {
				return fmt.Errorf("cluster: drop records of %s on close: %w", e.cfg.Node, err)
			}
			e.produced(res[1:])
			if flag(res[0]) {
				more = append(more, shards[i])
			}
		}
		shards = more
	}
	return nil
}

// produced hands the user edges a script made to the Relay's Produced.
func (e *Engine) produced(vals []any) {
	r := e.relay.Load()
	for i := 0; i+1 < len(vals); i += 2 {
		uid, _ := vals[i].(string)
		on := flag(vals[i+1])
		kind := "offline"
		if on {
			kind = "online"
		}
		e.m.edges.WithLabelValues(kind).Inc()
		if r != nil {
			r.Produced(uid, on)
		}
	}
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

// opTimeout bounds one batch of Redis calls: generous, so a loaded machine
// does not look like an outage, yet short of a node's lifetime.
func (e *Engine) opTimeout() time.Duration { return e.cfg.Timeout / 2 }
