// Package client is a Go client of presenced: it keeps one WebSocket to the
// server, reconnects it when it drops, and keeps the presence state the
// server reports (every joined channel's members, who of them is away and
// who types, the watched users' state and last seen, and the record of
// each user it sees: info, mode and note) exact across reconnects.
// It speaks WebSocket only: unlike the JavaScript client it does not fall
// back to Server-Sent Events where a proxy strips the upgrade.
//
// Dial connects and returns once the connection is live: the server's
// welcome and the snapshot of every channel of Options.Channels have come;
// it returns when its ctx ends, whatever the server does meanwhile.
// The Client then reconnects by itself after a network error or a close,
// with jittered exponential backoff that starts over only after a
// connection stayed live for 10 s, except after 4403 "disconnected" and
// 4401 "token expired" (which first asks Options.RefreshToken for a new
// token and reconnects with it if it gives one). After each reconnect it
// joins every channel again, sends the watch list and the away state again,
// and rebuilds each channel's and each watched user's state from the new
// snapshots, so nobody who left while it was away stays a member. Until a
// new snapshot comes, the last state is kept.
//
// The state is read with Channel, User and Record, whether or not the
// events are:
// Events delivers every frame the server sent, as the typed values of
// package protocol (*protocol.Joined, *protocol.Presence, *protocol.Chat,
// ...), and the Client's own *StateChange, after the state was updated,
// in the order they came.
//
// # Records
//
// Set sets the user's own mode (online, do-not-disturb or invisible) and
// status note; Record reads the record of any user the Client sees: its
// own user, the members it holds of its channels, and the watched users
// who are online. The records come with the snapshots, pages, watch
// answers and diffs that list the users (their Users), and changes with
// the diffs and status frames of the members and watched users (their
// Updated), which Events passes on like the rest. The Client forgets a
// record when it stops seeing the user (a leave, an offline, a channel
// left, a watch list without the user), so the records are bounded by the
// state, and it keeps its own.
//
// # Data events and notices
//
// Data events are never dropped: *protocol.Chat, *protocol.Publish,
// *protocol.Message, and the *protocol.Error (Ref set) that says a chat of
// this Client's was not delivered. When the event buffer
// (Options.EventBuffer) is full, the connection's reader waits until the
// application takes an event, or the Client is closed, and reads nothing
// from the server meanwhile: TCP carries the back-pressure to the server,
// and if the application stays behind, the server's send queue for it
// fills and the server closes the connection (1008, slow consumer); the
// Client reconnects then, as after any close. While the reader waits, the
// state is as of the last frame read, and calls awaiting an answer (Join,
// Leave, Watch, LoadMembers) wait as well; the other methods and Close do
// not. The reader waits only on a live connection: data events that find
// no room earlier (before Dial returns, or during the joins after a
// reconnect) are held and come first once it is live, so neither Dial nor
// a reconnect waits for the application.
//
// Every other event is a notice of state that Channel and User keep
// exact: snapshots, diffs, typing, status, answers, the welcome, each
// *StateChange. A notice that finds the buffer full, or a data event
// waiting for room, is dropped rather than waited for; Dropped counts
// them. Events keep their order either way: no notice overtakes a data
// event.
//
// # A server that misbehaves
//
// The Client checks what the server sends before it changes any state, so
// a broken or hostile server cannot make it use unbounded memory, loop, or
// hold a state no later frame repairs:
//
//   - A frame over Options.ReadLimit (4 MiB by default) ends the
//     connection (close 1009) before it is read; the Client reconnects.
//   - A second welcome on a connection ends it (close 1002); the Client
//     reconnects. A first frame that is not a welcome fails the attempt.
//   - A snapshot that contradicts itself (a negative or absurd count, more
//     members than its count, members out of order, away users it does
//     not list) fails the Join, or the reconnect, with ErrProtocol.
//   - A record that breaks the protocol's rules (an unknown mode, info
//     that is not a JSON object or is over protocol.MaxInfo bytes, a note
//     with neither text nor emoji, too long, or with a negative until), or
//     a record of a user the frame does not list, makes its frame broken:
//     a snapshot, page or watch answer fails its call with ErrProtocol, a
//     diff or status frame is ignored. A welcome's broken mode or note is
//     taken as none.
//   - A members page that breaks the paging rules (a next that does not
//     come after the request's after or is not the page's last member,
//     members not after after, out of order, more than asked or counted)
//     ends LoadMembers with ErrProtocol, so paging always ends.
//   - Other frames that cannot be right are ignored: neither applied nor
//     passed on to Events. These are diffs and typing frames with a
//     negative or absurd count or about a channel not joined on this
//     connection, snapshots, pages and watch answers nobody asked for, and
//     status about users not watched (a status frame, its records
//     included, is cut to the watched users). They never end the connection: ignored, they do no harm,
//     and the state the rest of the frames keep is still right.
//   - The welcome's timeout is taken between 300 ms and 10 minutes.
//
// Options.Logger gets a warning for each frame ignored as broken.
//
// # Concurrency
//
// All methods of a Client are safe for concurrent use. Each connection has
// one reader goroutine, which applies what the server sends to the state in
// the order it came, and one writer goroutine, which sends every frame
// (gorilla/websocket allows one of each); a third goroutine connects,
// reconnects and refreshes the token. Calls that send a frame (Join, Leave,
// Watch, Chat, Typing, SetActivity, Set, LoadMembers) made while the Client
// is reconnecting wait until it is live again or their context ends; Join,
// Leave, Watch, Set and LoadMembers also wait for the server's answer. Close
// stops everything and may be called more than once.
//
// # Keepalives
//
// The Client answers the server's WebSocket pings and sends an application
// ping every third of the server's timeout (the welcome's timeout_ms), so
// an idle connection stays online; it drops a connection that brought nothing for
// twice the timeout and reconnects. That clock runs only while the reader
// reads: time it spends waiting for the application to take a data event
// is not the server's silence, so a slow application never makes the
// Client drop its connection. The writer goes on sending app pings
// meanwhile, so the server does not take the Client for idle either (the
// server's WebSocket pings wait to be answered until the reader reads
// again); whether the application is too slow is the server's call, by its
// slow-consumer rule. With a RefreshToken it sends the server
// a newer token before the current one's "exp" (read from the token without
// verifying it), so the connection outlives each token.
package client
