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

// deliveredChunk bounds the IDs of one XACK that Delivered sends, so that
// a long list does not make one command that holds Redis up.
const deliveredChunk = 1_000

// Delivered tells the outbox (Config.Outbox) that the edges of ids reached
// their receiver, or were dropped on the way: they are no longer pending
// for a node that claims this one (the edges stay in the log). IDs of
// other engines, or of edges no longer pending, are ignored. A
// webhook.Sender's OnDone calls it. It takes a whole list in one round
// trip, an XACK per shard (per deliveredChunk IDs), so the caller batches.
func (e *Engine) Delivered(ctx context.Context, ids []string) error {
	if !e.cfg.Outbox || len(ids) == 0 {
		return nil
	}
	prefix := "evt_" + e.cfg.Prefix + "_"
	entries := make([][]string, len(e.keys))
	for _, id := range ids {
		rest, ok := strings.CutPrefix(id, prefix)
		if !ok {
			continue
		}
		shard, entry, ok := strings.Cut(rest, "_")
		s, err := strconv.Atoi(shard)
		if _, valid := parseLogID(entry); !ok || !valid || err != nil || s < 0 || s >= len(e.keys) {
			continue
		}
		entries[s] = append(entries[s], entry)
	}
	ctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	pipe := e.rdb.Pipeline()
	for s, list := range entries {
		for chunk := range slices.Chunk(list, deliveredChunk) {
			pipe.XAck(ctx, e.keys[s].log, outboxGroup, chunk...)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("cluster: acknowledge %d delivered edges in the outbox: %w", len(ids), err)
	}
	return nil
}

// outboxGroup is the consumer group of every shard's log that holds the
// edges pending delivery (see keepPending in lua/prelude_write.lua).
const outboxGroup = "hooks"
