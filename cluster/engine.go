package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
)

var (
	_ presence.Engine     = (*Engine)(nil)
	_ presence.Withdrawer = (*Engine)(nil)
)

// Config configures an Engine. Client is required; the rest has defaults.
type Config struct {
	// Client reaches Redis: *redis.Client, a Sentinel-backed failover client or
	// *redis.ClusterClient. The engine keeps one Pub/Sub connection per shard
	// that its clients follow.
	Client redis.UniversalClient
	// Node names this process in its logs and in Engine.Node; without '|',
	// ' ', '{' or '}'. Empty means hostname-pid. In Redis the process is
	// this name and a random suffix New draws, so a process started again
	// under the same name (by a supervisor, or in a container whose
	// hostname-pid repeats) is a new node there, and the records of the one
	// before it go, with their edges, once its liveness runs out, as any
	// dead node's do.
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
	// Batch is the most records one script call writes, and the most
	// messages one pipeline publishes; default 500, at most 2000. A call
	// that reaps a dead node's records takes at most 100 of them, or
	// Batch if smaller.
	Batch int
	// PublishTimeout bounds how long Publish waits for Redis to take a
	// message (a chat, a publish, a send, a disconnect); past it Publish
	// reports the message not delivered, and Redis does not publish it
	// later. Default 2s.
	PublishTimeout time.Duration
	// PublishQueue is the most messages that wait for Redis on this node;
	// Publish refuses one more at once. Default 10,000.
	PublishQueue int
	// LastSeenTTL is how long Redis keeps when a user last went offline,
	// for Status; default presence.DefaultLastSeenTTL (24 hours). The
	// records live in one sorted set per shard, trimmed by the offline
	// edges that add to it. Give the presence.Node the same: its clock
	// says when an offline user's last seen ran out (presence.ChangeForget),
	// and the engine then forgets the copy of the user's record it keeps.
	LastSeenTTL time.Duration
	// Outbox keeps every edge this node produces in Redis until Delivered
	// says it reached its receiver (a webhook): if the node dies first, the
	// node that claims it hands those edges to its own Relay as EventProduced,
	// under the same Edge.ID. Without it an edge is produced once,
	// and is lost if the node dies before passing it on. With it, an edge
	// is delivered at least once, and a receiver drops repeats by ID; every
	// edge must then reach Delivered, or it stays in Redis while this node
	// lives (edges of record changes, EdgeUpdate, are not kept).
	Outbox bool
	// Log bounds the log of edges every shard keeps (a Redis Stream per
	// shard, each edge appended by the script that makes it): about
	// Log.Max/Shards entries per shard, none older than Log.Keep. Zero
	// fields take presence.LogConfig's defaults.
	Log presence.LogConfig
	// Logger receives warnings about Redis; nil discards.
	Logger *slog.Logger
	// Registerer receives the engine's metrics; nil registers none.
	Registerer prometheus.Registerer
	// MetricsNamespace prefixes the metrics' names, as
	// MetricsNamespace_cluster_... ("presenced" if empty), so two engines
	// may share a Registerer.
	MetricsNamespace string
}

// Engine implements presence.Engine on Redis. Create it with New and hand it
// to a presence.Node (a transport Hub makes one), which attaches it and runs
// it; call Close on shutdown to drop this node's records at once.
type Engine struct {
	*base
	// The parts, each owning its state and the lock that guards it: the
	// writer what this node holds, written or not, and the goroutine that
	// writes, renews and claims; the router the followed topics, their
	// subscriptions and the Relay calls on their way; the publisher the
	// messages on their way to Redis and the goroutine that sends them;
	// health (in base) whether Redis answers. Lock order: router.mu, then
	// writer.mu (the router asks what this node holds while it decides a
	// Relay call), then health.mu; publisher.mu is held alone. No lock is
	// held while calling Redis or the Relay.
	w *writer
	r *router
	p *publisher
	f *forwarder

	withdrawOnce sync.Once
	withdrawErr  error
	closeOnce    sync.Once
	closeErr     error
}

// base is what the parts share: fixed by New, but for the Relay, which
// Attach sets once.
type base struct {
	// cfg.Node is this process's node in Redis, the configured name with
	// a suffix of its own: a name alone would let a restarted process renew
	// its predecessor's liveness and adopt records it does not hold, whose
	// users would then never go offline. name is the configured name, for
	// Node and the logs.
	cfg    Config
	logMax int // the entries a shard's log keeps: its share of Config.Log.Max
	clock  logClock
	name   string
	rdb    redis.UniversalClient
	log    *slog.Logger
	m      *metrics
	keys   []shardKeys
	retry  time.Duration // pause after a failed Redis operation
	health *health
	relayP atomic.Pointer[relayBox]
}

type relayBox struct{ presence.Relay }

// relay returns the attached Relay, or one that drops everything.
func (b *base) relay() presence.Relay {
	if r := b.relayP.Load(); r != nil {
		return r.Relay
	}
	return discard{}
}

func (b *base) attached() bool { return b.relayP.Load() != nil }

func (b *base) shard(name string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % uint32(len(b.keys)))
}

func (b *base) topicShard(t presence.Topic) int {
	if t.Channel != "" {
		return b.shard(t.Channel)
	}
	return b.shard(t.UID)
}

// topicName is the sharded Pub/Sub channel of a topic.
func (b *base) topicName(t presence.Topic) string {
	k := b.keys[b.topicShard(t)]
	if t.Channel != "" {
		return k.channelTopic(t.Channel)
	}
	return k.userTopic(t.UID)
}

// runEdgeScripts runs calls of the scripts that make edges, as
// runScripts does, each with the log's argument last (its retention and
// this node's clock; see appendLog in lua/prelude_write.lua), and takes
// the shard's clock off the end of each reply, raising this node's.
func (b *base) runEdgeScripts(ctx context.Context, calls []scriptRun) []*redis.Cmd {
	arg := "log " + strconv.Itoa(b.logMax) + " " + strconv.FormatInt(b.cfg.Log.Keep.Milliseconds(), 10) + " " + b.clock.String()
	for i := range calls {
		calls[i].args = append(slices.Clip(calls[i].args), arg)
	}
	cmds := runScripts(ctx, b.rdb, calls)
	for _, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil || len(vals) == 0 {
			continue
		}
		id, _ := vals[len(vals)-1].(string)
		b.clock.heard(id)
		cmd.SetVal(vals[:len(vals)-1])
	}
	return cmds
}

// opTimeout bounds one batch of Redis calls: generous, so a loaded machine
// does not look like an outage, yet short of a node's lifetime.
func (b *base) opTimeout() time.Duration { return b.cfg.Timeout / 2 }

// discard is the Relay before Attach.
type discard struct{}

func (discard) Receive(presence.Event) {}

// New validates cfg and starts the goroutines that write this node's records
// and publish its messages. It does not contact Redis: a node starts, and
// serves its own clients, while Redis is unreachable.
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
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = 2 * time.Second
	}
	if cfg.PublishQueue == 0 {
		cfg.PublishQueue = 10_000
	}
	if cfg.LastSeenTTL == 0 {
		cfg.LastSeenTTL = presence.DefaultLastSeenTTL
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
	case cfg.PublishTimeout < 10*time.Millisecond:
		return nil, fmt.Errorf("cluster: PublishTimeout %v too short", cfg.PublishTimeout)
	case cfg.PublishQueue < 1:
		return nil, fmt.Errorf("cluster: PublishQueue %d must be positive", cfg.PublishQueue)
	case cfg.LastSeenTTL < 0:
		return nil, fmt.Errorf("cluster: LastSeenTTL %v must not be negative", cfg.LastSeenTTL)
	}
	lc, err := cfg.Log.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("cluster: Config.Log: %w", err)
	}
	cfg.Log = lc
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("node", cfg.Node)
	m, err := newMetrics(cfg.Registerer, cfg.MetricsNamespace)
	if err != nil {
		return nil, fmt.Errorf("cluster: register metrics: %w", err)
	}
	name := cfg.Node
	cfg.Node = incarnation(name)
	b := &base{
		cfg:    cfg,
		logMax: (cfg.Log.Max + cfg.Shards - 1) / cfg.Shards,
		name:   name,
		rdb:    cfg.Client,
		log:    log,
		m:      m,
		retry:  min(max(cfg.RenewEvery/4, 10*time.Millisecond), time.Second),
		health: newHealth(cfg.Client, log, m),
	}
	for i := range cfg.Shards {
		k := newShardKeys(cfg.Prefix, i)
		if cfg.Outbox {
			k = k.withOutbox()
		}
		b.keys = append(b.keys, k)
	}
	w := newWriter(b)
	e := &Engine{base: b, w: w, r: newRouter(b, w), p: newPublisher(b)}
	e.f = newForwarder(b)
	w.recordOf, w.learned = e.r.knownRecord, e.r.wroteRecord
	w.start()
	e.p.start()
	return e, nil
}

// Node returns this node's name, as configured.
func (e *Engine) Node() string { return e.name }

// incarnation names this process in Redis: name and 64 random bits, so no
// two processes share one, whatever their names.
func incarnation(name string) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	return name + "#" + hex.EncodeToString(b[:])
}

// Attach hands the engine the Relay it delivers to. Called by presence.Node,
// once, before any other method; an embedder does not call it.
func (e *Engine) Attach(r presence.Relay) { e.relayP.Store(&relayBox{r}) }

// Run reads, until ctx is done, the edges and messages of the topics this
// node follows and hands them to the Relay. It keeps one sharded Pub/Sub
// subscription per shard; when one is lost and comes back, the topics it
// carries are read again once every live node has had a renewal round to
// write what Redis may have lost. It retries Redis forever and returns nil
// when ctx is done; it returns an error only while another Run is going.
// Called by presence.Node; an embedder does not call it.
func (e *Engine) Run(ctx context.Context) error {
	defer e.f.listen(ctx)()
	return e.r.runLoop(ctx)
}

// Apply records a change this node made. It never blocks on Redis: the
// writer's goroutine writes the changes in the order they were handed
// over, counts coalesced and batched, a record change after the counts
// handed over before it. A user or a membership arriving on this node is
// in the Relay when it returns, if the node follows its topic; activity
// edges come from Redis, which sums every node's. Called by presence.Node;
// an embedder does not call it.
func (e *Engine) Apply(c presence.Change) {
	switch c.Kind {
	case presence.ChangeUser:
		if e.w.setUser(c.UID, c.N, c.Away) && c.N > 0 {
			e.r.own(presence.Topic{UID: c.UID}, c.UID, func(r presence.Relay) {
				r.Receive(presence.Event{Kind: presence.EventUser, UID: c.UID, On: true, At: time.Now()})
			})
		}
	case presence.ChangeMember:
		// A user that turns invisible and joins at once joins invisible:
		// the join is shown when Redis has it, after the set, not at once
		// with the record the router knew before it.
		if e.w.setMember(c.Channel, c.UID, c.N > 0, c.Away == 1) && c.N > 0 {
			e.r.own(presence.Topic{Channel: c.Channel}, c.UID, func(r presence.Relay) {
				r.Receive(presence.Event{Kind: presence.EventMember, Channel: c.Channel, UID: c.UID, On: true})
			})
		}
	case presence.ChangeInfo:
		e.w.addRecordOp(recordOp{kind: opInfo, uid: c.UID, info: c.Info})
	case presence.ChangeSet:
		e.w.addRecordOp(recordOp{kind: opSet, uid: c.UID, set: c.Set})
	case presence.ChangeExpireNote:
		// Every node whose clients see the note asks; the script clears it
		// once, if it is still the one that runs out at Until and Until has
		// passed by this node's clock or Redis's.
		e.w.addRecordOp(recordOp{kind: opExpire, uid: c.UID, until: c.Until})
	case presence.ChangeForget:
		e.r.forget(c.UID)
	}
}

// Follow subscribes this node to topics and returns once the Relay has each
// one's current state; at once, with an error, while Redis is known to be
// down, and when ctx ends: the state follows when it can. It waits on
// Redis for nothing else: the subscribing is done by a goroutine of the
// shard's. Called by presence.Node; an embedder does not call it.
func (e *Engine) Follow(ctx context.Context, topics []presence.Topic) error {
	return e.r.follow(ctx, topics)
}

// Unfollow stops delivering topics nobody on this node follows any more.
// A topic is unsubscribed, and dropped from the Relay, a renewal interval
// later, so a follower that comes right back does not pay for a new
// snapshot. Called by presence.Node; an embedder does not call it.
func (e *Engine) Unfollow(topics []presence.Topic) { e.r.unfollow(topics) }

// Health pings Redis and waits for the answer a quarter of the timeout at
// most, kept within 0.5 s and 2 s, however long ctx allows: a Redis that
// does not answer by then is not ready, and a readiness probe during a
// stall hears so in time instead of waiting for the stall's end. It also
// reports not ready while this node's last write failed (a Redis Cluster
// whose master of some shard is gone answers pings) or a shard of the
// topics it follows cannot be heard (its subscription was lost and is not
// yet made again).
// Called through presence.Node for readiness; an embedder does not call it.
func (e *Engine) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, min(max(e.cfg.Timeout/4, 500*time.Millisecond), 2*time.Second))
	defer cancel()
	return e.health.ready(ctx)
}

// Withdraw lets the changes already handed to it land, then drops every
// record this node holds, so its users leave their channels and go offline
// at once (those also on another node stay), and hands the edges that makes
// to the Relay before it returns; from then on the engine writes, renews
// and claims nothing. presence.Node.Withdraw calls it on the way down, while
// the Node's callbacks still run, so they hear those edges; Close calls it
// too, for a Node that did not. Only the first call acts; later ones return
// its error.
func (e *Engine) Withdraw(ctx context.Context) error {
	e.withdrawOnce.Do(func() {
		e.w.settle(ctx)
		e.w.halt()
		e.withdrawErr = e.w.leave(ctx)
	})
	return e.withdrawErr
}

// Close stops publishing (messages still queued get an error), then
// withdraws (Withdraw) if the engine has not yet. It does not close the
// Redis client. Safe to call more than once.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.p.halt()
		e.closeErr = e.Withdraw(ctx)
	})
	return e.closeErr
}
