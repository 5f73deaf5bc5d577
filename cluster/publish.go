package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/presence"
)

// wireMessage is a presence.Message on Pub/Sub: its frame, JSON already,
// and the frame's type, so the receiving node counts it without reading it;
// in a channel, the user it is from, and whether it says that user types
// (then it has no frame).
type wireMessage struct {
	Kind  presence.MessageKind `json:"k,omitempty"`
	Frame json.RawMessage      `json:"f,omitempty"`
	Type  string               `json:"t,omitempty"`
	From  string               `json:"fr,omitempty"`
}

// Why Publish reports a message not delivered.
var (
	errQueueFull = errors.New("too many messages waiting for redis")
	errTimeout   = errors.New("redis did not take it in time")
	errTooLate   = errors.New("redis took it too late to publish it")
	errSettled   = errors.New("settled unpublished before it ran")
	errClosed    = errors.New("the engine is closed")
	// errNobody: published to a node's own channel, which nobody
	// subscribes to, so no node listens there.
	errNobody = fmt.Errorf("nobody listens on the channel: %w", presence.ErrNoNode)
)

// Publish sends m to the followers of its channel or user, on every node,
// at most once. It waits for Redis no longer than Config.PublishTimeout or
// ctx's deadline, whichever is sooner: m waits in this node's bounded
// publish queue until the node's publisher hands it to Redis. Publish
// returns nil once Redis has published m, and an error if it did not: the
// queue was full (at once), Redis refused it, or Redis did not take it in
// time. Redis publishes m only within the first three quarters of the wait,
// by its own clock, so one that got no answer in time is not published
// later either, unless its answer took longer than the last quarter to
// arrive (counted in presenced_cluster_published_late_total). A ctx
// cancelled before its deadline withdraws m if Redis has not had it yet,
// and otherwise waits for Redis's answer. Called by presence.Node; an
// embedder does not call it.
func (e *Engine) Publish(ctx context.Context, m presence.Message) error {
	w := wireMessage{Kind: m.Kind, Frame: m.Frame.Data, Type: m.Frame.Type, From: m.From}
	topic := presence.Topic{UID: m.UID}
	if m.Channel != "" {
		topic = presence.Topic{Channel: m.Channel}
	}
	payload, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("cluster: publish: %w", err)
	}
	shard := e.topicShard(topic)
	return e.publish(ctx, shard, e.topicName(topic), payload, false)
}

// publish hands payload to the publisher for the Pub/Sub channel of shard
// named channel, and waits for the outcome as Publish says. heard asks for
// a subscriber: a message published to none then fails with errNobody, as a
// node's own channel has one while the node runs (a topic's may have none).
func (e *Engine) publish(ctx context.Context, shard int, channel string, payload []byte, heard bool) error {
	var id [12]byte
	_, _ = rand.Read(id[:])
	now := time.Now()
	give := now.Add(e.cfg.PublishTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(give) {
		give = d
	}
	o := &outgoing{
		shard:   shard,
		idKey:   e.keys[shard].msg(hex.EncodeToString(id[:])),
		channel: channel,
		payload: payload,
		heard:   heard,
		wait:    give.Sub(now),
		give:    give,
		last:    give.Add(-give.Sub(now) / 4),
		result:  make(chan error, 1),
	}
	if err := e.p.enqueue(o); err != nil {
		return e.p.failed(err)
	}
	return e.p.failed(e.p.await(ctx, o))
}

// publisher hands the messages of Publish to Redis: callers queue them and
// wait for their outcome, and one goroutine (loop) sends what is queued in
// pipelined batches. So a stalled Redis delays delivery but holds no caller
// past its deadline, and a queue longer than Config.PublishQueue refuses at
// once.
//
// Each message tells Redis the last moment it may be published, by Redis's
// clock: a quarter of its caller's wait before the caller gives up,
// converted with the offset between Redis's clock and this process's that
// Redis's replies show (taken at their arrival, so the offset errs towards
// the past). Redis refuses a message it runs later, after a stall say, so a
// caller who had no answer when it gave up is told the truth: not
// delivered. A message whose answer was lost (a broken connection, a
// timeout) is settled by taking its ID: if the ID was free the message was
// not, and now never will be, published; if it was taken, it was. Settling
// answers a caller still waiting, and counts a message published after its
// caller gave up.
type publisher struct {
	*base
	epoch time.Time // local clock readings are monotonic offsets from it

	// mu guards the queue and every message's state; nothing that waits is
	// called while it is held.
	mu      lockorder.Mutex[lockorder.Publisher]
	queue   []*outgoing // oldest first; only those in state waiting count
	waiting int         // messages in queue in state waiting
	closed  bool
	wake    chan struct{}

	// Owned by loop.
	clocks    []redisClock // by shard
	unsettled []*outgoing  // handed to Redis, answer lost

	stop context.CancelFunc
	done chan struct{} // closed when loop returns
}

// An outgoing message is one Publish call's message.
type outgoing struct {
	shard   int
	idKey   string
	channel string // its Pub/Sub channel
	payload []byte
	heard   bool // fails with errNobody if no subscriber got it
	wait    time.Duration
	give    time.Time  // when its caller gives up: wait after it called
	last    time.Time  // when Redis must have run it, so the answer can come by give
	result  chan error // its outcome, sent once, under publisher.mu

	state outState // guarded by publisher.mu
	cause error    // why its answer was lost; guarded by publisher.mu
}

type outState int

const (
	waiting   outState = iota // in the queue
	sent                      // handed to Redis, not answered yet
	abandoned                 // sent, and its caller gave up on it
	answered                  // its outcome is in result, or it left the queue unsent
)

// redisClock relates a shard's Redis clock to this process's: Redis's time
// in ms is offset plus the local milliseconds since epoch.
type redisClock struct {
	offset int64
	at     time.Time // when it was read; zero: never
}

// clockFresh is how long a Redis clock reading is trusted without a new one:
// two clocks that NTP keeps drift apart by a few ms at most in that time.
const clockFresh = time.Minute

func newPublisher(b *base) *publisher {
	return &publisher{
		base:   b,
		epoch:  time.Now(),
		wake:   make(chan struct{}, 1),
		clocks: make([]redisClock, len(b.keys)),
		done:   make(chan struct{}),
	}
}

func (p *publisher) start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go p.loop(ctx)
}

// halt refuses messages from now on, stops the loop and answers those still
// queued.
func (p *publisher) halt() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.queue {
		if o.state == waiting {
			o.state = answered
			o.result <- errClosed
		}
	}
	p.queue, p.waiting = nil, 0
	p.m.publishQueue.Set(0)
}

// enqueue queues o, unless the queue is full or closed.
func (p *publisher) enqueue(o *outgoing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return errClosed
	case p.waiting >= p.cfg.PublishQueue:
		return fmt.Errorf("%w (%d)", errQueueFull, p.waiting)
	}
	p.queue = append(p.queue, o)
	p.waiting++
	p.m.publishQueue.Set(float64(p.waiting))
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// await waits for o's outcome until o.give.
func (p *publisher) await(ctx context.Context, o *outgoing) error {
	timer := time.NewTimer(time.Until(o.give))
	defer timer.Stop()
	select {
	case err := <-o.result:
		return err
	case <-timer.C:
		err, _ := p.giveUp(o, nil, true)
		return err
	case <-ctx.Done():
	}
	// Cancelled before the deadline: withdraw o if Redis has not had it;
	// if it has, its answer comes by o.give.
	if err, ended := p.giveUp(o, ctx.Err(), false); ended {
		return err
	}
	select {
	case err := <-o.result:
		return err
	case <-timer.C:
		err, _ := p.giveUp(o, nil, true)
		return err
	}
}

// giveUp ends the wait for o if it can: a queued o leaves the queue unsent
// (why: ctx's error, or nil for the deadline), an answered one returns its
// outcome. One handed to Redis and not answered is abandoned if abandon is
// set: Redis does not publish it after o.last. ended is false if o is still
// waited for.
func (p *publisher) giveUp(o *outgoing, why error, abandon bool) (err error, ended bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch o.state {
	case waiting:
		o.state = answered
		p.waiting--
		p.m.publishQueue.Set(float64(p.waiting))
		if len(p.queue) > 2*p.waiting+64 {
			// Drop the withdrawn messages the loop has not reached: while
			// Redis stalls, callers give up faster than it takes them.
			p.queue = slices.DeleteFunc(p.queue, func(o *outgoing) bool { return o.state != waiting })
		}
		if why != nil {
			return fmt.Errorf("not sent: %w", why), true
		}
		return fmt.Errorf("%w: not sent within %v", errTimeout, o.wait.Round(time.Millisecond)), true
	case answered:
		return <-o.result, true
	case sent:
		if !abandon {
			return nil, false
		}
		o.state = abandoned
		if o.cause != nil {
			return fmt.Errorf("%w: no answer within %v: %w", errTimeout, o.wait.Round(time.Millisecond), o.cause), true
		}
		return fmt.Errorf("%w: no answer within %v", errTimeout, o.wait.Round(time.Millisecond)), true
	}
	return errors.New("cluster: publish: abandoned twice"), true // not reached: one caller per message
}

// failed counts why a Publish call failed and wraps its error; nil passes.
func (p *publisher) failed(err error) error {
	if err == nil {
		return nil
	}
	reason := "error"
	for _, r := range []struct {
		err  error
		name string
	}{{errQueueFull, "queue_full"}, {errTimeout, "timeout"}, {errTooLate, "too_late"}, {errClosed, "closed"},
		{errNobody, "no_listener"}, {context.Canceled, "cancelled"}} {
		if errors.Is(err, r.err) {
			reason = r.name
			break
		}
	}
	p.m.publishFailed.WithLabelValues(reason).Inc()
	return fmt.Errorf("cluster: publish: %w", err)
}

// answer hands o its outcome, unless its caller has given up on it.
func (p *publisher) answer(o *outgoing, err error) {
	p.mu.Lock()
	st := o.state
	o.state = answered
	if st == sent {
		o.result <- err
	}
	p.mu.Unlock()
	if st == abandoned && err == nil {
		p.m.publishedLate.Inc()
		p.log.Warn("cluster: redis published a message after its sender was told it was not; its answer took over a quarter of the wait",
			"channel", o.channel)
	}
}

// lost records that o's answer was lost, so it is settled later.
func (p *publisher) lost(o *outgoing, err error) {
	p.mu.Lock()
	o.cause = err
	p.mu.Unlock()
	p.unsettled = append(p.unsettled, o)
}

func (p *publisher) loop(ctx context.Context) {
	defer close(p.done)
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-retry:
			retry = nil
		}
		for ctx.Err() == nil {
			batch := p.take()
			if len(batch) == 0 && len(p.unsettled) == 0 {
				break
			}
			p.send(ctx, batch)
			if len(batch) == 0 {
				break // settling alone failed: retry later
			}
		}
		if len(p.unsettled) > 0 && retry == nil {
			retry = time.After(p.retry)
		}
	}
}

// take takes up to a batch of queued messages, marking them sent.
func (p *publisher) take() []*outgoing {
	p.mu.Lock()
	defer p.mu.Unlock()
	var batch []*outgoing
	n := 0
	for ; n < len(p.queue) && len(batch) < p.cfg.Batch; n++ {
		if o := p.queue[n]; o.state == waiting {
			o.state = sent
			batch = append(batch, o)
		}
	}
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	p.waiting -= len(batch)
	p.m.publishQueue.Set(float64(p.waiting))
	return batch
}

// send settles what was left unsettled and hands batch to Redis, in one
// pipeline, waiting no longer than the last of the batch's callers.
func (p *publisher) send(ctx context.Context, batch []*outgoing) {
	until := time.Now().Add(p.cfg.PublishTimeout)
	if len(batch) > 0 {
		until = batch[0].give
		for _, o := range batch {
			until = later(until, o.give)
		}
	}
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	clockErr := p.readClocks(ctx, batch)

	life := (2 * p.cfg.Timeout).Milliseconds()
	settling := p.unsettled
	p.unsettled = nil
	var calls []scriptRun
	for _, o := range settling {
		calls = append(calls, scriptRun{settleScript, []string{o.idKey}, []any{life}})
	}
	now := time.Now()
	var out []*outgoing
	for _, o := range batch {
		c := p.clocks[o.shard]
		switch {
		case c.at.IsZero():
			p.answer(o, fmt.Errorf("%w: reading its clock: %w", errTimeout, clockErr))
		case !now.Before(o.last):
			p.answer(o, fmt.Errorf("%w: not sent within %v", errTimeout, o.wait.Round(time.Millisecond)))
		default:
			out = append(out, o)
			calls = append(calls, scriptRun{publishScript, []string{o.idKey}, []any{o.channel, o.payload, life, p.redisMillis(c, o.last)}})
		}
	}
	if len(calls) == 0 {
		return
	}
	cmds := runScripts(ctx, p.rdb, calls)
	arrived := time.Now()
	settles, cmds := cmds[:len(settling)], cmds[len(settling):]

	var failed error
	for i, o := range settling {
		published, err := settles[i].Int()
		switch {
		case err != nil:
			failed = err
			if time.Since(o.give) < p.cfg.Timeout {
				p.lost(o, err)
				continue
			}
			// Its ID may have expired since: give up settling it.
			p.log.Warn("cluster: gave up settling a publish whose answer was lost; its sender was told it failed", "channel", o.channel, "err", err)
			p.answer(o, fmt.Errorf("%w: %w", errTimeout, err))
		case published == 1:
			p.answer(o, nil)
		default:
			p.answer(o, fmt.Errorf("%w: its answer was lost (%w), and it is not published", errTimeout, o.cause))
		}
	}
	for i, o := range out {
		res, err := scriptResult(cmds[i], 3)
		if err != nil {
			if _, refused := errors.AsType[redis.Error](err); refused {
				// Redis answered with an error: the script did not publish.
				p.answer(o, err)
				continue
			}
			failed = err
			p.lost(o, err)
			continue
		}
		if now, ok := res[1].(int64); ok {
			p.clocks[o.shard] = redisClock{offset: now - p.millis(arrived, true), at: arrived}
		}
		switch code, _ := res[0].(int64); code {
		case 1:
			if got, _ := res[2].(int64); o.heard && got == 0 {
				p.answer(o, errNobody)
				continue
			}
			p.answer(o, nil)
		case -1:
			p.answer(o, errTooLate)
		default:
			p.answer(o, errSettled) // not reached: only a message with a lost answer is settled
		}
	}
	if failed != nil {
		p.health.fail("publish", failed)
	} else {
		p.health.ok()
	}
}

// readClocks reads the clock of the batch's shards whose reading is old; it
// returns the last error.
func (p *publisher) readClocks(ctx context.Context, batch []*outgoing) error {
	now := time.Now()
	var shards []int
	for _, o := range batch {
		if c := p.clocks[o.shard]; (c.at.IsZero() || now.Sub(c.at) > clockFresh) && !slices.Contains(shards, o.shard) {
			shards = append(shards, o.shard)
		}
	}
	if len(shards) == 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(shards))
	pipe := p.rdb.Pipeline()
	for i, s := range shards {
		cmds[i] = timeScript.Eval(ctx, pipe, []string{p.keys[s].alive})
	}
	_, _ = pipe.Exec(ctx)
	arrived := time.Now()
	var last error
	for i, s := range shards {
		ms, err := cmds[i].Int64()
		if err != nil {
			p.health.fail("clock", err)
			last = err
			continue
		}
		p.clocks[s] = redisClock{offset: ms - p.millis(arrived, true), at: arrived}
	}
	return last
}

// millis returns t in ms since p.epoch, rounded up or down.
func (p *publisher) millis(t time.Time, up bool) int64 {
	d := t.Sub(p.epoch)
	ms := d.Milliseconds()
	if up && d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// redisMillis returns local time t by Redis's clock c, rounded down.
func (p *publisher) redisMillis(c redisClock, t time.Time) int64 {
	return p.millis(t, false) + c.offset
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
