package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// shardKeyNames are the keys of a shard, T:<name>, in the order every
// script of the shard is given them as KEYS: the list of
// lua/prelude_keys.lua, which lays them out. The last two, the outbox,
// only with Config.Outbox (withOutbox).
var shardKeyNames = luaKeyNames()

// shardKeys names the keys of one shard; see lua/prelude_keys.lua.
type shardKeys struct {
	tag, alive string
	online     string
	conns      string
	members    string   // T:c, the channels' members as "channel uid"
	keys       []string // every key, in the order of shardKeyNames: KEYS of a script
}

func newShardKeys(prefix string, shard int) shardKeys {
	tag := "{" + prefix + ":" + strconv.Itoa(shard) + "}"
	k := shardKeys{tag: tag, alive: tag + ":alive", online: tag + ":online", conns: tag + ":conns", members: tag + ":c"}
	for _, name := range shardKeyNames[:len(shardKeyNames)-2] {
		k.keys = append(k.keys, tag+":"+name)
	}
	return k
}

// withOutbox is k with the outbox's keys in its scripts' KEYS, which turns
// the outbox on (see produce in the scripts).
func (k shardKeys) withOutbox() shardKeys {
	ob, oe := k.outboxKeys()
	k.keys = append(slices.Clip(k.keys), ob, oe)
	return k
}

func (k shardKeys) outboxKeys() (ob, oe string) { return k.tag + ":ob", k.tag + ":oe" }

// memberBounds bound, for ZRANGE BYLEX and ZLEXCOUNT on k.members, the
// records of channel's members after after ("": all); a record less
// its first len(channel)+1 bytes is the member.
func memberBounds(channel, after string) (min, max string) {
	min = "[" + channel + " "
	if after != "" {
		min = "(" + channel + " " + after
	}
	return min, "(" + channel + "!"
}

func (k shardKeys) userTopic(uid string) string        { return k.tag + ":pu:" + uid }
func (k shardKeys) channelTopic(channel string) string { return k.tag + ":pc:" + channel }
func (k shardKeys) msg(id string) string               { return k.tag + ":msg:" + id }

// scriptResult reads the array of integers and strings a script returns.
func scriptResult(cmd *redis.Cmd, min int) ([]any, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	if len(vals) < min {
		return nil, fmt.Errorf("script returned %d values, want at least %d", len(vals), min)
	}
	return vals, nil
}

// flag reads an integer a script returned as a boolean.
func flag(v any) bool {
	n, _ := v.(int64)
	return n == 1
}

// isNoScript reports whether err says Redis does not have the script (its
// cache is empty after a restart or failover).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// A scriptRun is one script call on its keys.
type scriptRun struct {
	s    *luaScript
	keys []string
	args []any
}

// runScripts makes calls in a pipeline by their scripts' SHAs, then those
// that met an empty script cache (Redis restarted: they did not run) again
// with the source; their errors name the scripts' files (see explain).
func runScripts(ctx context.Context, rdb redis.UniversalClient, calls []scriptRun) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.s.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe = rdb.Pipeline()
		for _, i := range again {
			cmds[i] = calls[i].s.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, cmd := range cmds {
		calls[i].s.explainCmd(cmd)
	}
	return cmds
}
