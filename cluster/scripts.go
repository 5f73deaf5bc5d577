package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Every script runs on the keys of one shard, all under the shard's hash tag
// T = {prefix:N}, so it touches a single cluster slot. KEYS[1] is T:alive, which
// routes the call; the other names are built from the tag in ARGV[1]:
//
//	T:alive      ZSET  node -> liveness expiry (ms, Redis clock); renewed per node, never per user
//	T:dead       SET   nodes whose liveness expired and whose records are being reaped
//	T:clock      HASH  last = time of the last claim, pause = no claims before
//	T:u:<node>   HASH  uid -> connections the node holds, for users of this shard
//	T:m:<node>   SET   "channel uid": the node's memberships, for channels of this shard
//	T:nodes      HASH  uid -> nodes holding the user (the online edge counter)
//	T:conns      HASH  uid -> connections summed over nodes
//	T:online     ZSET  online users, score 0 (listed in order with ZRANGE BYLEX)
//	T:mn         HASH  "channel uid" -> nodes holding the membership (the join edge counter)
//	T:c:<chan>   ZSET  the channel's members, score 0
//	T:seq        STRING the shard's edge counter: orders edges against snapshots
//	T:msg:<id>   STRING a published message's ID, so a retried or settled publish is not delivered twice
//
// Edges are published, inside the script that makes them, on the sharded
// Pub/Sub channels T:pu:<uid> and T:pc:<channel>, which only the nodes
// following that user or channel subscribe to.
//
// Expiry uses the Redis server's clock (TIME), so nodes' clocks never matter.
// Scripts are effect-replicated (always so since Redis 7; asked for on 5-6).
const luaPrelude = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tag = ARGV[1]
local function K(s) return tag .. ':' .. s end

-- produced collects this call's user edges for the caller: uid, 1|0, ...
local produced = {}

local function publish(channel, msg)
  msg.s = redis.call('INCR', K('seq'))
  redis.call('SPUBLISH', channel, cjson.encode(msg))
end

-- setUser sets node's connection count for uid and emits the user's edge
-- when its first node arrives or its last one goes.
local function setUser(node, uid, n)
  local uk = K('u:' .. node)
  local old = tonumber(redis.call('HGET', uk, uid) or '0')
  if n == old then return end
  if n > 0 then redis.call('HSET', uk, uid, n) else redis.call('HDEL', uk, uid) end
  if redis.call('HINCRBY', K('conns'), uid, n - old) <= 0 then redis.call('HDEL', K('conns'), uid) end
  if old == 0 then
    if redis.call('HINCRBY', K('nodes'), uid, 1) == 1 then
      redis.call('ZADD', K('online'), 0, uid)
      publish(K('pu:' .. uid), {on = 1})
      produced[#produced + 1] = uid
      produced[#produced + 1] = 1
    end
  elseif n == 0 then
    if redis.call('HINCRBY', K('nodes'), uid, -1) <= 0 then
      redis.call('HDEL', K('nodes'), uid)
      redis.call('ZREM', K('online'), uid)
      publish(K('pu:' .. uid), {on = 0})
      produced[#produced + 1] = uid
      produced[#produced + 1] = 0
    end
  end
end

-- setMember records whether node holds a membership of uid in channel and
-- emits the join or leave edge when the first node arrives or the last goes.
local function setMember(node, channel, uid, on)
  local rec = channel .. ' ' .. uid
  if on then
    if redis.call('SADD', K('m:' .. node), rec) == 0 then return end
    if redis.call('HINCRBY', K('mn'), rec, 1) == 1 then
      redis.call('ZADD', K('c:' .. channel), 0, uid)
      publish(K('pc:' .. channel), {u = uid, j = 1})
    end
  else
    if redis.call('SREM', K('m:' .. node), rec) == 0 then return end
    if redis.call('HINCRBY', K('mn'), rec, -1) <= 0 then
      redis.call('HDEL', K('mn'), rec)
      redis.call('ZREM', K('c:' .. channel), uid)
      publish(K('pc:' .. channel), {u = uid, j = 0})
    end
  end
end

-- alive renews node's liveness in this shard; 1 means it had been taken
-- for dead (or Redis lost it), so the node must write its records again.
local function alive(node, ttl)
  local added = redis.call('ZADD', KEYS[1], now + ttl, node)
  local reaped = redis.call('SREM', K('dead'), node)
  if added == 1 or reaped == 1 then return 1 end
  return 0
end

-- reap drops up to budget of node's records and returns what is left of
-- budget; the node leaves the dead set once it has none.
local function reap(node, budget)
  local uk, mk = K('u:' .. node), K('m:' .. node)
  local cursor = '0'
  repeat
    local r = redis.call('HSCAN', uk, cursor, 'COUNT', budget)
    cursor = r[1]
    for i = 1, #r[2], 2 do
      if budget <= 0 then break end
      setUser(node, r[2][i], 0)
      budget = budget - 1
    end
  until cursor == '0' or budget <= 0
  cursor = '0'
  while budget > 0 do
    local r = redis.call('SSCAN', mk, cursor, 'COUNT', budget)
    cursor = r[1]
    for _, rec in ipairs(r[2]) do
      if budget <= 0 then break end
      local sep = string.find(rec, ' ', 1, true)
      setMember(node, string.sub(rec, 1, sep - 1), string.sub(rec, sep + 1), false)
      budget = budget - 1
    end
    if cursor == '0' then break end
  end
  if redis.call('EXISTS', uk, mk) == 0 then redis.call('SREM', K('dead'), node) end
  return budget
end
`

// setScript renews the node's liveness in the shard, then applies its
// records: ARGV after tag, node, ttl ms is a list of "u", uid, n (n
// connections, 0 drops the record) and "m", channel, uid, 1|0.
// Returns {1 if the node had been taken for dead, then uid, 1|0 per user edge}.
var setScript = redis.NewScript(luaPrelude + `
local node = ARGV[2]
local back = alive(node, tonumber(ARGV[3]))
local i = 4
while i <= #ARGV do
  if ARGV[i] == 'u' then
    setUser(node, ARGV[i + 1], tonumber(ARGV[i + 2]))
    i = i + 3
  else
    setMember(node, ARGV[i + 1], ARGV[i + 2], ARGV[i + 3] == '1')
    i = i + 4
  end
end
table.insert(produced, 1, back)
return produced
`)

// claimScript renews the claiming node, marks the nodes whose liveness
// expired as dead and reaps up to ARGV[4] of their records. The script is
// atomic, so when several nodes claim at once each record is dropped, and
// each edge emitted, by exactly one of them.
//
// A long gap since the last claim by any node means nobody reached Redis
// meanwhile (Redis stalled or was cut off from all nodes): every node may
// look expired then, though it is alive and about to renew. So after a gap of
// ARGV[5] ms claims pause for ARGV[6] ms, one renewal round. That also
// covers a claim sent before a stall and run by Redis only after it.
// ARGV: tag, claiming node, ttl ms, limit, gap ms, pause ms.
// Returns {1 if the claimer had been taken for dead, 1 if paused, 1 if more
// is left to reap, then uid, 1|0 per user edge}.
var claimScript = redis.NewScript(luaPrelude + `
local by = ARGV[2]
local last = tonumber(redis.call('HGET', K('clock'), 'last') or '0')
local pause = tonumber(redis.call('HGET', K('clock'), 'pause') or '0')
redis.call('HSET', K('clock'), 'last', now)
local back = alive(by, tonumber(ARGV[3]))
if now - last > tonumber(ARGV[5]) then
  redis.call('HSET', K('clock'), 'pause', now + tonumber(ARGV[6]))
  return {back, 1, 0}
end
if now < pause then return {back, 1, 0} end
for _, node in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('ZREM', KEYS[1], node)
  redis.call('SADD', K('dead'), node)
end
local budget = tonumber(ARGV[4])
for _, node in ipairs(redis.call('SMEMBERS', K('dead'))) do
  budget = reap(node, budget)
  if budget <= 0 then break end
end
local more = 0
if redis.call('SCARD', K('dead')) > 0 then more = 1 end
local out = {back, 0, more}
for _, v in ipairs(produced) do out[#out + 1] = v end
return out
`)

// leaveScript drops up to ARGV[3] of the node's own records, for a node that
// shuts down; once none is left it drops the node's liveness too.
// ARGV: tag, node, limit. Returns {1 if more is left, then uid, 1|0 per user edge}.
var leaveScript = redis.NewScript(luaPrelude + `
local node = ARGV[2]
redis.call('SADD', K('dead'), node)
local more = 0
if reap(node, tonumber(ARGV[3])) <= 0 then more = 1 end
if redis.call('EXISTS', K('u:' .. node), K('m:' .. node)) == 0 then
  redis.call('ZREM', KEYS[1], node)
  redis.call('SREM', K('dead'), node)
  more = 0
end
local out = {more}
for _, v in ipairs(produced) do out[#out + 1] = v end
return out
`)

// channelScript reads a channel's members with the shard's edge counter in
// one atomic step, so edges after the snapshot are told from those in it.
// ARGV: tag, channel. Returns {seq, member, ...}.
var channelScript = redis.NewScript(`
local tag = ARGV[1]
local seq = tonumber(redis.call('GET', tag .. ':seq') or '0')
local out = redis.call('ZRANGE', tag .. ':c:' .. ARGV[2], 0, -1)
table.insert(out, 1, seq)
return out
`)

// usersScript reads whether users are online, with the edge counter.
// ARGV: tag, uid, ... Returns {seq, 1|0 per uid}.
var usersScript = redis.NewScript(`
local tag = ARGV[1]
local out = {tonumber(redis.call('GET', tag .. ':seq') or '0')}
for i = 2, #ARGV do
  if redis.call('ZSCORE', tag .. ':online', ARGV[i]) then out[i] = 1 else out[i] = 0 end
end
return out
`)

// publishScript publishes a message once, and only until its last moment.
// Its ID records the outcome: "1" once published, "0" once settled unpublished
// (settleScript), so a call run again (go-redis retries on a broken
// connection) or after settling publishes nothing and reports the truth; a
// call Redis runs too late (after a stall) publishes nothing either, as its
// sender has given up on it.
// KEYS[1] = T:msg:<id>; ARGV: Pub/Sub channel, message, ID lifetime ms, last
// moment (ms, Redis clock). Returns {1 if published (now or before), 0 if
// settled unpublished, -1 if too late; Redis's time in ms}.
var publishScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = redis.call('GET', KEYS[1])
if id == '1' then return {1, now} end
if id then return {0, now} end
if now > tonumber(ARGV[4]) then return {-1, now} end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[3])
redis.call('SPUBLISH', ARGV[1], ARGV[2])
return {1, now}
`)

// settleScript settles a message whose answer was lost: unless it was
// published, its ID is marked so that it never will be.
// KEYS[1] = T:msg:<id>; ARGV: ID lifetime ms. Returns 1 if the message was
// published, 0 if not.
var settleScript = redis.NewScript(`
local id = redis.call('GET', KEYS[1])
if id == '1' then return 1 end
if not id then redis.call('SET', KEYS[1], '0', 'PX', ARGV[1]) end
return 0
`)

// timeScript returns Redis's time in ms; KEYS[1] routes it to a shard's
// server, whose clock is the one its messages are published by.
var timeScript = redis.NewScript(`
local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`)

// shardKeys names the keys of one shard; see the table above.
type shardKeys struct {
	tag, alive string
	online     string
	conns      string
}

func newShardKeys(prefix string, shard int) shardKeys {
	tag := "{" + prefix + ":" + strconv.Itoa(shard) + "}"
	return shardKeys{tag: tag, alive: tag + ":alive", online: tag + ":online", conns: tag + ":conns"}
}

func (k shardKeys) members(channel string) string      { return k.tag + ":c:" + channel }
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

// A scriptRun is one script call on one key.
type scriptRun struct {
	s    *redis.Script
	key  string
	args []any
}

// runScripts makes calls in a pipeline by their scripts' SHAs, then those
// that met an empty script cache (Redis restarted: they did not run) again
// with the source.
func runScripts(ctx context.Context, rdb redis.UniversalClient, calls []scriptRun) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.s.EvalSha(ctx, pipe, []string{c.key}, c.args...)
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
			cmds[i] = calls[i].s.Eval(ctx, pipe, []string{calls[i].key}, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}
