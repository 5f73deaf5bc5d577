package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/presenced/presenced/presence"
)

// wireMessage is a presence.Message on Pub/Sub: its frame, JSON already,
// and the frame's type, so the receiving node counts it without reading it.
type wireMessage struct {
	Frame      json.RawMessage `json:"f,omitempty"`
	Type       string          `json:"t,omitempty"`
	Disconnect int             `json:"x,omitempty"`
}

// Publish sends m to the followers of its channel or user, on every node,
// at most once. An error means it was not delivered: a call whose answer
// was lost (Redis stalled, the connection broke) is cancelled by its ID
// before Publish gives up, and if the cancellation finds it already
// published, Publish reports success. The cancellation is retried until
// Redis answers it, for at most the ID's lifetime, so Publish may outlast
// ctx while Redis is stalled. Called by presence.Node; an embedder does not
// call it.
func (e *Engine) Publish(ctx context.Context, m presence.Message) error {
	w := wireMessage{Frame: m.Frame.Data, Type: m.Frame.Type}
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
		e.health.ok()
		return nil
	}
	e.health.fail("publish", err)
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
