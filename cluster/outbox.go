package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/presenced/presenced/presence"
)

// edgeID names an edge by id, its entry's ID in its shard's log:
// "evt_<prefix>_<shard>_<id>", unique where nodes share Prefix, and the
// same whichever node hands it on and in a replay of the log.
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

// deliveredChunk bounds the members of one ZREM or HDEL that Delivered
// sends, so that a long list does not make one command that holds Redis up.
const deliveredChunk = 1_000

// Delivered tells the outbox (Config.Outbox) that the edges of ids reached
// their receiver, or were dropped on the way: they are no longer kept for
// a node that claims this one. IDs of other engines, or of edges no longer
// kept, are ignored. A webhook.Sender's OnDone calls it. It takes a whole
// list in one round trip, a ZREM and an HDEL per shard (per
// deliveredChunk IDs), so the caller batches.
func (e *Engine) Delivered(ctx context.Context, ids []string) error {
	if !e.cfg.Outbox || len(ids) == 0 {
		return nil
	}
	prefix := "evt_" + e.cfg.Prefix + "_"
	seqs := make([][]string, len(e.keys))
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
		seqs[s] = append(seqs[s], seq)
	}
	ctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	pipe := e.rdb.Pipeline()
	for s, list := range seqs {
		ob, oe := e.keys[s].outboxKeys()
		for chunk := range slices.Chunk(list, deliveredChunk) {
			members := make([]any, len(chunk))
			for i, seq := range chunk {
				members[i] = e.cfg.Node + " " + seq
			}
			pipe.ZRem(ctx, ob, members...)
			pipe.HDel(ctx, oe, chunk...)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("cluster: clear %d delivered edges from the outbox: %w", len(ids), err)
	}
	return nil
}
