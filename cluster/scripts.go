package cluster

// The scripts of a shard run on its keys, all of them as KEYS, in the order
// of shardKeyNames (lua/prelude_keys.lua lays them out). Each is assembled
// from its file of lua/ after a prelude; the file's header names its ARGV
// and what it returns, which the Go side builds and reads.

// writePrelude comes before the scripts that write: the keys, Redis's
// clock, edges, the outbox, kept replies, records and presence.
var writePrelude = []string{"prelude_keys.lua", "prelude_write.lua", "prelude_records.lua", "prelude_presence.lua"}

// readPrelude is what the scripts that only read need of writePrelude.
var readPrelude = []string{"prelude_keys.lua", "prelude_read.lua", "prelude_records.lua", "prelude_read_window.lua"}

// logPrelude comes before the scripts that read the log of edges.
var logPrelude = []string{"prelude_keys.lua", "prelude_log.lua"}

var (
	// setScript renews a node's liveness in a shard, then applies its records.
	setScript = newLuaScript(writePrelude, "set.lua")
	// claimScript renews the claiming node and reaps the dead nodes' records.
	claimScript = newLuaScript(writePrelude, "claim.lua")
	// leaveScript drops the records of a node that shuts down.
	leaveScript = newLuaScript(writePrelude, "leave.lua")
	// recordScript changes users' records, in order.
	recordScript = newLuaScript(writePrelude, "record.lua")
	// memberRecordScript copies a user's changed record to its channels.
	memberRecordScript = newLuaScript(writePrelude, "member_record.lua")

	// channelScript reads a channel's members and their records' copies.
	channelScript = newLuaScript(readPrelude, "channel.lua")
	// usersScript reads users' presence, last seen and records.
	usersScript = newLuaScript(readPrelude, "users.lua")
	// statusScript reads one user's connections, last seen and record.
	statusScript = newLuaScript(readPrelude, "status.lua")
	// recordsScript reads users' records.
	recordsScript = newLuaScript(readPrelude, "records.lua")
	// hiddenScript lists the shard's invisible users that are online.
	hiddenScript = newLuaScript(readPrelude, "hidden.lua")

	// logScript reads a shard's log of edges from a position.
	logScript = newLuaScript(logPrelude, "log.lua")
	// listingScript counts and pages users or members with the log's position.
	listingScript = newLuaScript(logPrelude, "listing.lua")

	// publishScript publishes a message once, and only until its last moment.
	publishScript = newLuaScript(nil, "publish.lua")
	// settleScript settles a message whose answer was lost.
	settleScript = newLuaScript(nil, "settle.lua")
	// timeScript returns Redis's time in ms.
	timeScript = newLuaScript(nil, "time.lua")
)
