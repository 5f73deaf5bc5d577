// Package client is a Go client of presenced: it keeps one WebSocket to the
// server, reconnects it when it drops, and keeps the presence state the
// server reports (every joined channel's members, who of them is away and
// who types, and the watched users' state and last seen) exact across
// reconnects.
//
// Dial connects and returns once the connection is live: the server's
// welcome and the snapshot of every channel of Options.Channels have come.
// The Client then reconnects by itself after a network error or a close,
// with jittered exponential backoff, except after 4403 "disconnected" and
// 4401 "token expired" (which first asks Options.RefreshToken for a new
// token and reconnects with it if it gives one). After each reconnect it
// joins every channel again, sends the watch list and the away state again,
// and rebuilds each channel's and each watched user's state from the new
// snapshots, so nobody who left while it was away stays a member. Until a
// new snapshot comes, the last state is kept.
//
// The state is read with Channel and User, whether or not the events are:
// Events delivers every frame the server sent, as the typed values of
// package protocol (*protocol.Joined, *protocol.Presence, *protocol.Chat,
// ...), and the Client's own *StateChange, after the state was updated,
// in the order they came.
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
// # Concurrency
//
// All methods of a Client are safe for concurrent use. Each connection has
// one reader goroutine, which applies what the server sends to the state in
// the order it came, and one writer goroutine, which sends every frame
// (gorilla/websocket allows one of each); a third goroutine connects,
// reconnects and refreshes the token. Calls that send a frame (Join, Leave,
// Watch, Chat, Typing, SetActivity, LoadMembers) made while the Client is
// reconnecting wait until it is live again or their context ends; Join,
// Leave, Watch and LoadMembers also wait for the server's answer. Close
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
