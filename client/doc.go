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
// ...), and the Client's own *StateChange, after the state was updated. A
// full event buffer drops events rather than blocking; Dropped counts them.
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
// twice the timeout and reconnects. With a RefreshToken it sends the server
// a newer token before the current one's "exp" (read from the token without
// verifying it), so the connection outlives each token.
package client
