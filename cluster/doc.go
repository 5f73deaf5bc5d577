// Package cluster shares presence between several presenced nodes through
// Redis (single server, Sentinel or Cluster, via go-redis's UniversalClient).
//
// Each node keeps its own ring for its own connections: a keepalive never
// touches Redis. What a node holds (its users' connection counts and their
// channel memberships) is written to Redis only when it changes, coalesced
// and batched; the node proves it is alive with one liveness entry per shard,
// renewed a few times per timeout, so Redis's steady-state work does not grow
// with the number of users. Lua scripts change the records atomically and
// publish each edge (a user's first node arrives or its last goes; a user's
// first membership of a channel appears or its last goes) on a sharded
// Pub/Sub channel of that user or channel. A node subscribes only to the
// channels and users its own connections follow. A node that dies stops
// renewing; the first live node to claim its shards reaps its records and
// emits their edges, each exactly once.
//
// Users' records (info, mode, note) live in the users' shards for as long
// as last seen does, changed by scripts that publish each change on the
// user's topic; the nodes that hold the user's memberships copy it to the
// channels' shards and topics (see lua/prelude_records.lua and routerrecords.go).
//
// Messages (chat, publish, send, disconnect) wait in a bounded queue per
// node that one goroutine hands to Redis, so a stalled Redis delays them but
// holds no caller past Config.PublishTimeout; one not taken in time is
// reported not delivered, and Redis does not publish it afterwards.
//
// All keys of a shard share one hash tag, so every script touches one cluster
// slot. Nodes that share presence must use the same Prefix and Shards.
//
// # Where each rule is decided
//
// Each rule below is decided in one place; the rest of the package calls it.
//
//   - Atomicity and keys: every change to Redis is one Lua script on one
//     shard's keys (one cluster slot), laid out in lua/prelude_keys.lua;
//     each script's file names its KEYS and ARGV.
//   - Edges, each exactly once: a user's node count (T:nodes) and a
//     membership's (T:mn) turn 0<->1 inside setUser and setMember
//     (lua/prelude_presence.lua), the only places a presence edge is made
//     (a record's update edge is made from its script's reply, records.go,
//     where the record's version changed); a call
//     that runs twice answers once (recall, lua/prelude_write.lua, and
//     recall.go for the calls whose replies were lost).
//   - The log of edges: every edge produced is appended to its shard's
//     stream (T:log) by the call that makes it, its ID the edge's
//     (appendLog, lua/prelude_write.lua); retention from Config.Log.
//   - Reading the log back: a cursor is each shard's last entry read and
//     its number in the stream, with the shards' epochs (cursor.go);
//     Edges merges the shards by (ms, n, shard), a second behind Redis's
//     clock, and says when a cursor is trimmed or lost (edges.go,
//     logread.go, lua/log.lua); a listing carries the cursor it is exact
//     at (listing.go, lua/listing.lua).
//   - Liveness of nodes: a node's life in a shard, and what every call
//     may do from it (owes, lost, held, live), is standing
//     (lua/prelude_presence.lua); a claim ends a life and reaps its
//     records (claim.go, lua/claim.lua: die, takeOver, remark); the node
//     begins its next life and writes everything again (writer.go), and a
//     claimer remembers the lives it ended (reaps.go).
//   - Redis that lost writes: found by standing (a version below what
//     landed, or an older life), put back by the restore (mode "r" in
//     writer.go) with the edges wentOffline owes (lua/prelude_write.lua).
//   - Ordering of changes: a node's changes are written in the order it
//     made them, coalesced per record (changes.go, writer.go); one round's
//     produced edges go out online, activity, membership, offline
//     (claim.go: produced); a followed topic's events after its snapshot
//     only if newer than it (reader.go: decide).
//   - Records (info, mode, note) and their copies in channels:
//     lua/prelude_records.lua and routerrecords.go.
//   - Messages: a bounded queue per node, not published after its timeout
//     (publish.go); requests to one node, such as a forwarded POST, go on
//     that node's own channel (forward.go).
//   - Locks: the Engine's parts and their lock order are stated on Engine
//     (engine.go); across packages, internal/lockorder's list.
package cluster
