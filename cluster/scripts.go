package cluster

import (
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Every script runs on the six keys of one shard, all under the same hash tag,
// so it touches a single cluster slot:
//
//	KEYS[1] leases  ZSET  node|uid -> lease expiry (ms, Redis clock)
//	KEYS[2] lconns  HASH  node|uid -> connections the node holds for uid
//	KEYS[3] nodes   HASH  uid -> number of leases (nodes holding uid)
//	KEYS[4] conns   HASH  uid -> connections summed over nodes
//	KEYS[5] online  ZSET  uid, score 0 (listing in order with ZRANGE BYLEX)
//	KEYS[6] events  STREAM u=uid on=1|0 by=node, one entry per edge
//	KEYS[7] clock   HASH  last = time of the last claim, pause = no claims before (claim only)
//
// Expiry uses the Redis server's clock (TIME), so nodes' clocks never matter.
// Scripts are effect-replicated (always so since Redis 7; asked for on 5-6).
const luaPrelude = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function edge(uid, on, by, maxlen)
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', maxlen, '*', 'u', uid, 'on', on, 'by', by)
end

-- drop removes the lease m (node|uid) holding old connections and emits the
-- offline edge when it was the user's last lease.
local function drop(m, uid, old, by, maxlen)
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
  if redis.call('HINCRBY', KEYS[4], uid, -old) <= 0 then redis.call('HDEL', KEYS[4], uid) end
  if redis.call('HINCRBY', KEYS[3], uid, -1) <= 0 then
    redis.call('HDEL', KEYS[3], uid)
    redis.call('ZREM', KEYS[5], uid)
    edge(uid, '0', by, maxlen)
    return 1
  end
  return 0
end
`

// setScript sets this node's lease for each (uid, n) pair: n > 0 adds or
// renews the lease (online edge on the user's first lease), n == 0 drops it
// (offline edge on the last). Renewal is the same call, so a lease that Redis
// lost (restart, failover) is simply added again.
// A renewal (ARGV[4] == "1") passes the counts the node last set; it first
// tries one ZADD XX CH over the batch: when every lease was there, that is
// all it costs.
// ARGV: node, ttl ms, stream maxlen, renewal 0|1, then uid, n pairs.
// Returns {leases added, leases dropped, online edges, offline edges}.
var setScript = redis.NewScript(luaPrelude + `
local node, ttl, maxlen = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local exp = now + ttl
if ARGV[4] == '1' then
  local z = {}
  for i = 5, #ARGV, 2 do
    if tonumber(ARGV[i + 1]) <= 0 then z = nil break end
    z[#z + 1] = exp
    z[#z + 1] = node .. '|' .. ARGV[i]
  end
  if z and #z > 0 and redis.call('ZADD', KEYS[1], 'XX', 'CH', unpack(z)) == #z / 2 then
    return {0, 0, 0, 0}
  end
end
local added, dropped, on, off = 0, 0, 0, 0
for i = 5, #ARGV, 2 do
  local uid, n = ARGV[i], tonumber(ARGV[i + 1])
  local m = node .. '|' .. uid
  local old = tonumber(redis.call('HGET', KEYS[2], m) or '0')
  if n > 0 then
    redis.call('ZADD', KEYS[1], exp, m)
    if old ~= n then
      redis.call('HSET', KEYS[2], m, n)
      redis.call('HINCRBY', KEYS[4], uid, n - old)
    end
    if old == 0 then
      added = added + 1
      if redis.call('HINCRBY', KEYS[3], uid, 1) == 1 then
        redis.call('ZADD', KEYS[5], 0, uid)
        edge(uid, '1', node, maxlen)
        on = on + 1
      end
    end
  elseif old > 0 then
    dropped = dropped + 1
    off = off + drop(m, uid, old, node, maxlen)
  end
end
return {added, dropped, on, off}
`)

// claimScript drops up to ARGV[3] leases whose expiry has passed: they belong
// to nodes that stopped renewing (crashed, or cut off from Redis). The script
// is atomic, so when several nodes claim at once each lease is dropped, and
// each offline edge emitted, by exactly one of them.
//
// Claims run every few moments on every node. A long gap since the last one
// means nobody reached Redis meanwhile (Redis stalled or was cut off from all
// nodes): every lease may look expired then, though its node is alive and
// about to renew. So after a gap of ARGV[4] ms claims pause for ARGV[5] ms,
// one renewal round. That also covers a claim sent before a stall and run by
// Redis only after it.
// ARGV: claiming node, stream maxlen, limit, gap ms, pause ms.
// Returns {claimed, offline edges, 1 if paused}.
var claimScript = redis.NewScript(luaPrelude + `
local by, maxlen, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local last = tonumber(redis.call('HGET', KEYS[7], 'last') or '0')
local pause = tonumber(redis.call('HGET', KEYS[7], 'pause') or '0')
redis.call('HSET', KEYS[7], 'last', now)
if now - last > tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[7], 'pause', now + tonumber(ARGV[5]))
  return {0, 0, 1}
end
if now < pause then return {0, 0, 1} end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local off = 0
for _, m in ipairs(expired) do
  local sep = string.find(m, '|', 1, true)
  local uid = string.sub(m, sep + 1)
  local old = tonumber(redis.call('HGET', KEYS[2], m) or '0')
  off = off + drop(m, uid, old, 'claim:' .. by, maxlen)
end
return {#expired, off, 0}
`)

// shardKeys names the keys of one shard; see the table above.
type shardKeys struct {
	leases, lconns, nodes, conns, online, events, clock string
	all                                                 []string // for setScript
	claim                                               []string // for claimScript
}

func newShardKeys(prefix string, shard int) shardKeys {
	tag := "{" + prefix + ":" + strconv.Itoa(shard) + "}"
	k := shardKeys{
		leases: tag + ":leases",
		lconns: tag + ":lconns",
		nodes:  tag + ":nodes",
		conns:  tag + ":conns",
		online: tag + ":online",
		events: tag + ":events",
		clock:  tag + ":clock",
	}
	k.all = []string{k.leases, k.lconns, k.nodes, k.conns, k.online, k.events}
	k.claim = append(k.all[:len(k.all):len(k.all)], k.clock)
	return k
}

// scriptResult reads the array of integers a script returns.
func scriptResult(cmd *redis.Cmd, want int) ([]int64, error) {
	vals, err := cmd.Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(vals) != want {
		return nil, fmt.Errorf("script returned %d values, want %d", len(vals), want)
	}
	return vals, nil
}
