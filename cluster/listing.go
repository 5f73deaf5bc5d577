package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// UsersAt is Users with the cursor the listing is exact at: each shard's
// users are read with the position of its log in one script call, so the
// listing holds every edge before the cursor and none after it. Called by
// presence.Node; an embedder does not call it.
func (e *Engine) UsersAt(ctx context.Context, limit int) (int, []string, string, error) {
	calls := make([]scriptRun, len(e.keys))
	for i, k := range e.keys {
		calls[i] = scriptRun{listingScript, k.keys, []any{"online", "-", "+", "-", max(limit, 0), e.cfg.Node, e.w.landedIn(i)}}
	}
	lists, cursor, err := e.listAt(ctx, "users", calls, -1)
	if err != nil {
		return 0, nil, "", err
	}
	count := 0
	var users []string
	for _, l := range lists {
		count += l.count
		users = append(users, l.page...)
	}
	if limit <= 0 {
		return count, nil, cursor, nil
	}
	users = append([]string{}, users...)
	slices.Sort(users)
	return count, users[:min(limit, len(users))], cursor, nil
}

// MembersAt is Members with the cursor the listing is exact at: the
// channel's shard is read with the position of its log in one script
// call, the other shards' positions in the same pipeline. Called by
// presence.Node; an embedder does not call it.
func (e *Engine) MembersAt(ctx context.Context, channel, after string, limit int) (int, []string, string, error) {
	shard := e.shard(channel)
	start, stop := memberBounds(channel, after)
	all, _ := memberBounds(channel, "")
	calls := make([]scriptRun, len(e.keys))
	for i, k := range e.keys {
		if i == shard {
			calls[i] = scriptRun{listingScript, k.keys, []any{"c", all, stop, start, max(limit, 0), e.cfg.Node, e.w.landedIn(i)}}
		} else {
			calls[i] = scriptRun{logScript, k.keys, []any{"", 0, "", logSettle.Milliseconds()}}
		}
	}
	lists, cursor, err := e.listAt(ctx, "members", calls, shard)
	if err != nil {
		return 0, nil, "", fmt.Errorf("%w (channel %q)", err, channel)
	}
	members := []string{}
	for _, rec := range lists[shard].page {
		members = append(members, rec[len(channel)+1:])
	}
	return lists[shard].count, members, cursor, nil
}

// A shardListing is what listing.lua read of one shard.
type shardListing struct {
	count     int
	page      []string
	unsettled bool // nodes are still putting back what Redis lost
}

// ErrRestoring is what UsersAt and MembersAt return (wrapped) while Redis
// has lost records that the nodes have not put back yet: a listing then
// would miss users and members whose edges the log had before the loss.
// Ask again in a few seconds.
var ErrRestoring = errors.New("cluster: redis lost records that the nodes are still putting back")

// listAt runs calls, one per shard: listing.lua on the shard listed (-1:
// on every one), log.lua for the position alone on the others. It returns
// the listings and the cursor of the positions read.
func (e *Engine) listAt(ctx context.Context, op string, calls []scriptRun, listed int) ([]shardListing, string, error) {
	cmds := runScripts(ctx, e.rdb, calls)
	lists := make([]shardListing, len(calls))
	cur := logCursor{pos: make([]logPos, len(calls))}
	epochs := make([]string, len(calls))
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			e.health.fail(op, err)
			return nil, "", fmt.Errorf("cluster: list %s with the log's position in shard %d: %w", op, i, err)
		}
	}
	for i, cmd := range cmds {
		var err error
		if listed < 0 || i == listed {
			err = e.parseListing(cmd, &lists[i], &epochs[i], &cur.pos[i])
			if err == nil && lists[i].unsettled {
				err = ErrRestoring
			}
		} else {
			var vals []any
			var l shardLog
			if vals, err = scriptResult(cmd, 8); err == nil {
				if l, err = e.parseShardLog(i, vals); err == nil {
					epochs[i], cur.pos[i] = l.epoch, logPos{l.last, l.added}
				}
			}
		}
		if err != nil {
			return nil, "", fmt.Errorf("cluster: list %s with the log's position in shard %d: %w", op, i, err)
		}
	}
	e.health.ok()
	cur.epochs = epochHash(epochs)
	return lists, cur.encode(), nil
}

// parseListing reads listing.lua's reply: the listing, the shard's epoch
// and its log's position, at the last entry generated.
func (e *Engine) parseListing(cmd *redis.Cmd, l *shardListing, epoch *string, pos *logPos) error {
	vals, err := scriptResult(cmd, 6)
	if err != nil {
		return err
	}
	l.unsettled = flag(vals[5])
	*epoch, _ = vals[0].(string)
	last, _ := vals[1].(string)
	p, err := parseEntryID(last)
	if err != nil {
		return fmt.Errorf("last-generated-id: %w", err)
	}
	added, _ := vals[2].(int64)
	*pos = logPos{p, uint64(max(added, 0))}
	count, _ := vals[3].(int64)
	l.count = int(count)
	l.page = stringList(vals[4])
	return nil
}

// LogStats returns how many edges the shards' logs keep together and when
// the oldest of them was logged (the ms of its entry's ID; zero when the
// logs keep none), in one pipeline of an XLEN and an XRANGE per shard.
func (e *Engine) LogStats(ctx context.Context) (int, time.Time, error) {
	pipe := e.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(e.keys))
	firsts := make([]*redis.XMessageSliceCmd, len(e.keys))
	for i, k := range e.keys {
		lens[i] = pipe.XLen(ctx, k.logKey())
		firsts[i] = pipe.XRangeN(ctx, k.logKey(), "-", "+", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.health.fail("logstats", err)
		return 0, time.Time{}, fmt.Errorf("cluster: read the log's length: %w", err)
	}
	e.health.ok()
	total := 0
	var oldest uint64
	for i := range e.keys {
		total += int(lens[i].Val())
		for _, m := range firsts[i].Val() {
			p, err := parseEntryID(m.ID)
			if err != nil {
				return 0, time.Time{}, fmt.Errorf("cluster: the log's first entry in shard %d: %w", i, err)
			}
			if oldest == 0 || p.ms < oldest {
				oldest = p.ms
			}
		}
	}
	if oldest == 0 {
		return total, time.Time{}, nil
	}
	return total, time.UnixMilli(int64(oldest)), nil
}

// logKey is the shard's log of edges, T:log.
func (k shardKeys) logKey() string { return k.tag + ":log" }
