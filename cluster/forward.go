package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// The engine is a presence.Forwarder: a request goes to the node it names,
// and the answer back, each as one message on the named node's own sharded
// Pub/Sub channel, handed to Redis by the publisher as Publish's messages
// are (so a message Redis did not take in time is not published later
// either). A node subscribes to its channel while Run runs. Topics do not
// fit: a request is for one node, whoever follows what, and its answer for
// the node that asked.

// wireForward is a request (K "q") or an answer (K "a") on a node's channel.
type wireForward struct {
	K    string `json:"k"`
	ID   string `json:"id"`
	From string `json:"fr,omitempty"` // the asking node, on a request
	Body []byte `json:"b"`
}

// forwarder waits for the answers to this node's requests.
type forwarder struct {
	*base
	mu        sync.Mutex             // a leaf: nothing is called while it is held
	waiting   map[string]chan []byte // by request ID
	listening atomic.Bool
}

func newForwarder(b *base) *forwarder {
	return &forwarder{base: b, waiting: make(map[string]chan []byte)}
}

// inbox is the Pub/Sub channel of the node at addr, and its shard.
func (b *base) inbox(addr string) (int, string) {
	shard := b.shard(addr)
	return shard, b.keys[shard].tag + ":pn:" + addr
}

// Address is this node's incarnation: a restarted process has another.
func (e *Engine) Address() string { return e.cfg.Node }

// Forward hands req to the node at address to and returns its answer. It
// fails when Redis did not take the request, with presence.ErrNoNode when
// Redis says nobody listens at to (SPUBLISH reaches no subscriber), and
// when no answer came
// before ctx ended: the node is gone, or Redis or the node is slow (the
// request may have arrived then). Called by presence.Node.
func (e *Engine) Forward(ctx context.Context, to string, req []byte) ([]byte, error) {
	if strings.Contains(to, "|") {
		return nil, fmt.Errorf("cluster: forward: %q is not a node's address", to)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	answer := make(chan []byte, 1)
	f := e.f
	f.mu.Lock()
	f.waiting[id] = answer
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.waiting, id)
		f.mu.Unlock()
	}()
	payload, err := json.Marshal(wireForward{K: "q", ID: id, From: e.cfg.Node, Body: req})
	if err != nil {
		return nil, fmt.Errorf("cluster: forward: %w", err)
	}
	shard, name := e.inbox(to)
	if err := e.publish(ctx, shard, name, payload, true); err != nil {
		return nil, fmt.Errorf("cluster: forward: %w", err)
	}
	select {
	case a := <-answer:
		return a, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("cluster: forward: no answer from the node: %w", ctx.Err())
	}
}

// Answer sends the answer to m, a request that reached this node's Relay.
// Called by presence.Node.
func (e *Engine) Answer(ctx context.Context, m presence.Message, answer []byte) error {
	from, id, ok := strings.Cut(m.Reply, "|")
	if m.Kind != presence.MessageForward || !ok {
		return errors.New("cluster: answer: not a forwarded request")
	}
	payload, err := json.Marshal(wireForward{K: "a", ID: id, Body: answer})
	if err != nil {
		return fmt.Errorf("cluster: answer: %w", err)
	}
	shard, name := e.inbox(from)
	if err := e.publish(ctx, shard, name, payload, true); err != nil {
		return fmt.Errorf("cluster: answer: %w", err)
	}
	return nil
}

// listen subscribes to this node's channel until ctx ends or the returned
// stop is called, handing requests to the Relay and answers to their
// waiters. go-redis re-subscribes after a lost connection by itself; what
// was published meanwhile is lost, and its sender, unanswered, gives up.
func (f *forwarder) listen(ctx context.Context) (stop func()) {
	if !f.listening.CompareAndSwap(false, true) {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	_, name := f.inbox(f.cfg.Node)
	ps := f.rdb.SSubscribe(ctx, name)
	var wg sync.WaitGroup
	wg.Go(func() {
		for msg := range ps.Channel() {
			f.received(msg.Payload)
		}
	})
	return func() {
		cancel()
		_ = ps.Close()
		wg.Wait()
		f.listening.Store(false)
	}
}

// received handles one message on this node's channel.
func (f *forwarder) received(payload string) {
	var w wireForward
	if err := json.Unmarshal([]byte(payload), &w); err != nil {
		f.log.Warn("cluster: a message on this node's channel is not ours", "err", err)
		return
	}
	switch w.K {
	case "q":
		f.relay().Receive(presence.Event{Kind: presence.EventMessage, Message: presence.Message{Kind: presence.MessageForward,
			Reply: w.From + "|" + w.ID, Frame: protocol.Encoded{Type: "forward", Data: w.Body}}})
	case "a":
		f.mu.Lock()
		answer := f.waiting[w.ID]
		f.mu.Unlock()
		if answer != nil {
			select {
			case answer <- w.Body:
			default: // answered twice: the first one stands
			}
		}
	}
}
