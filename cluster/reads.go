package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// Status returns uid's connections summed over all nodes, whether it is
// away and, while it is offline, when it went offline if that was within
// Config.LastSeenTTL, in one round trip. Called by presence.Node; an
// embedder does not call it.
func (e *Engine) Status(ctx context.Context, uid string) (presence.UserStatus, error) {
	k := e.keys[e.shard(uid)]
	cmd := runScripts(ctx, e.rdb, []scriptRun{{statusScript, k.keys, []any{k.tag, uid, e.cfg.LastSeenTTL.Milliseconds()}}})[0]
	vals, err := scriptResult(cmd, 5)
	if err != nil {
		e.health.fail("lookup", err)
		return presence.UserStatus{}, fmt.Errorf("cluster: look up the status of %q: %w", uid, err)
	}
	e.health.ok()
	conns, _ := vals[0].(int64)
	away, _ := vals[1].(int64)
	seen, _ := vals[2].(int64)
	st := presence.UserStatus{Conns: int(conns), Away: conns > 0 && away >= conns}
	if conns <= 0 && seen > 0 {
		st.LastSeen = time.UnixMilli(seen)
	}
	if raw, _ := vals[4].(string); raw != "" {
		if err := json.Unmarshal([]byte(raw), &st.Record); err != nil {
			return presence.UserStatus{}, fmt.Errorf("cluster: the record of %q: %w", uid, err)
		}
	}
	if hid, _ := vals[3].(int64); hid > 0 && st.Record.Mode == protocol.ModeInvisible {
		st.HiddenAt = time.UnixMilli(hid)
	}
	return st, nil
}

// Users returns how many users are online on any node and the first limit of
// their IDs in ascending order. Called by presence.Node; an embedder does
// not call it.
func (e *Engine) Users(ctx context.Context, limit int) (int, []string, error) {
	return e.listing(ctx, "users", func(k shardKeys) string { return k.online }, e.keys, limit)
}

// Members returns how many members channel has on any node and up to limit
// of their IDs greater than after ("": from the first), in ascending order,
// in one round trip. Called by presence.Node; an embedder does not call it.
func (e *Engine) Members(ctx context.Context, channel, after string, limit int) (int, []string, error) {
	key := e.keys[e.shard(channel)].members
	// Members sort by their bytes (score 0): after is strictly after.
	start, stop := memberBounds(channel, after)
	all, _ := memberBounds(channel, "")
	// MULTI, so the count and the page are of one moment; the key is one
	// cluster slot.
	pipe := e.rdb.TxPipeline()
	card := pipe.ZLexCount(ctx, key, all, stop)
	var page *redis.StringSliceCmd
	if limit > 0 {
		page = pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: key, Start: start, Stop: stop, ByLex: true, Count: int64(limit)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.health.fail("members", err)
		return 0, nil, fmt.Errorf("cluster: page members of %q: %w", channel, err)
	}
	e.health.ok()
	members := []string{}
	if page != nil {
		for _, rec := range page.Val() {
			members = append(members, rec[len(channel)+1:])
		}
	}
	return int(card.Val()), members, nil
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
		e.health.fail(op, err)
		return 0, nil, fmt.Errorf("cluster: list %s: %w", op, err)
	}
	e.health.ok()
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
