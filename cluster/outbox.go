package cluster

import (
	"context"
	"strconv"
	"strings"

	"github.com/presenced/presenced/presence"
)

// edgeID names an edge kept in the outbox under id in its shard:
// "evt_<prefix>_<shard>_<id>", unique where nodes share Prefix, and the
// same whichever node hands it on.
func (b *base) edgeID(e presence.Edge, id string) string {
	return "evt_" + b.cfg.Prefix + "_" + strconv.Itoa(b.edgeShard(e)) + "_" + id
}

// edgeShard is the shard that made e: its channel's for a membership, its
// user's otherwise.
func (b *base) edgeShard(e presence.Edge) int {
	if e.Channel != "" {
		return b.shard(e.Channel)
	}
	return b.shard(e.UID)
}

// Delivered tells the outbox (Config.Outbox) that the edges of ids reached
// their receiver: they are no longer kept for a node that claims this one.
// IDs of other engines, or of edges no longer kept, are ignored. A
// webhook.Sender's OnDone calls it.
func (e *Engine) Delivered(ctx context.Context, ids []string) error {
	if !e.cfg.Outbox || len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	prefix := "evt_" + e.cfg.Prefix + "_"
	pipe := e.rdb.Pipeline()
	for _, id := range ids {
		rest, ok := strings.CutPrefix(id, prefix)
		if !ok {
			continue
		}
		shard, seq, ok := strings.Cut(rest, "_")
		s, err := strconv.Atoi(shard)
		if !ok || err != nil || s < 0 || s >= len(e.keys) {
			continue
		}
		ob, oe := e.keys[s].outboxKeys()
		pipe.ZRem(ctx, ob, e.cfg.Node+" "+seq)
		pipe.HDel(ctx, oe, seq)
	}
	if pipe.Len() == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}
