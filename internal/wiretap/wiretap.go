// Package wiretap lets tests see the WebSocket text frames the server
// reads and writes, to check them against the protocol's description. It
// holds one variable and imports nothing, so the server links nothing more
// for it.
package wiretap

// Frame, when not nil, is called with each text frame a transport.Hub
// reads from a client (in; data is nil for a binary frame, which is not
// read) or writes to one, on the goroutine doing it; it must not keep data. Set it before any Hub starts (in TestMain) and never
// change it after.
var Frame func(in bool, data []byte)
