// Package presence keeps who is online and who is in which channel, counted
// over connections, and turns its changes into the frames clients asked for.
//
// A Node is one server process's side of it, and its one clock: it holds the
// deadlines of everything it counts on rings of its own (a connection's
// keepalives, an HTTP-heartbeat lease, a grace period, a token's expiry, a
// last-seen record, a typing indicator), stepped by Run. Its connections
// are Clients of any kind (the transport package's WebSockets): each
// keepalive is a Touch, and the Node probes a silent connection and closes
// it when it times out. A user is online while
// at least one of its connections, or a heartbeat lease, is live, and a
// member of a channel while one of them has joined it. A grace period may
// hold a user's presence for a while after its last connection went, so a
// page reload does not flap. The counts go to an Engine, which stores them
// and tells each node about the edges of the topics it follows: in memory
// for one node; through Redis for several.
//
// Clients hear only what they asked for: a connection that joined a channel
// gets a snapshot, then at most one diff per tick with the channel's joins
// and leaves netted over the tick (a user who leaves and comes back within it
// appears in neither list); one that watches users gets at most one status
// frame per tick. A snapshot and the diffs after it never miss or repeat an
// edge. Above Config.PresenceLists members a channel's diffs carry its count
// only.
//
// # Where each rule is decided
//
// Each rule below is decided in one place; the rest of the package calls it.
//
//   - Online and member: a user is online here while counts.go counts a
//     live connection, a lease or a grace period of it, and a member of a
//     channel while it counts one there (userState.count, memberCount).
//     The Engine hears those counts, never a connection (counts.go).
//   - Liveness of connections: the ring's deadlines and what a deadline
//     that ran out does (probe, time out, reprieve after a stall) are in
//     clock.go (Node.step, reprieveLocked); the ring's own arithmetic (the
//     slot just behind the cursor, one slot scanned a step) is package
//     tracker's (Tracker.touch, Tracker.step). Liveness of nodes is the
//     Engine's: package cluster's.
//   - Ordering of changes: into the Engine, one queue applied in the order
//     the changes were made (counts.go: queueLocked, sendOps, and
//     Store.Apply); out of it, one ordered stream of Events per topic
//     (event.go: Relay), which view.Receive takes in one place.
//   - Netting and "a snapshot and its diffs never miss or repeat an
//     edge": each subscriber's base in its channel's log, and the diff
//     made from it at the tick (flush.go: flushChannel, diffFor; page.go
//     for a page asked mid-tick).
//   - Visibility: who sees an invisible user, and as what, is See
//     (visibility.go); the view keeps an invisible member apart
//     (channelView.hide) and turns it with turnLocked (records.go).
//   - Last seen: when a user went offline or turned invisible, and how
//     long that is kept, is the seenBook (lastseen.go).
//   - Locks: the one order every lock is taken in, across packages, is
//     package internal/lockorder's list; no lock is held while calling an
//     Engine, and none at all while a hook of the embedder runs.
package presence
