// Package protocol is the wire format of presenced: every frame a client and
// the server exchange over a WebSocket, as a Go type with its JSON encoding,
// the parsing of the frames a client sends, the names a channel and a user
// may have, and the close codes.
//
// A frame is a JSON object whose "type" comes first. Encode writes one once,
// so a frame fanned out to many connections costs one encoding; ParseClient
// reads what a client sent, with errors a client developer understands, and
// ParseServer reads what the server sent, as a client does.
package protocol

// Version is the version of the protocol this package speaks, sent in the
// welcome frame and by GET /healthz, so a client can tell which server it
// talks to. A minor version only adds fields and frames that older clients
// may ignore.
const Version = "2.2"

// Close codes the server sends, besides the standard ones below.
const (
	// CloseIdleTimeout closes a connection silent past the timeout.
	CloseIdleTimeout = 4408
	// CloseTokenExpired closes a connection whose token expired.
	CloseTokenExpired = 4401
	// CloseDisconnected closes the connections the server side ended.
	CloseDisconnected = 4403

	// CloseGoingAway closes every connection on server shutdown.
	CloseGoingAway = 1001
	// CloseInvalidPayload closes a connection that sent a text frame that is
	// not UTF-8.
	CloseInvalidPayload = 1007
	// ClosePolicyViolation closes a slow consumer (its send queue is full)
	// and a connection that keeps sending over its limits.
	ClosePolicyViolation = 1008
	// CloseTooBig closes a connection that sent a frame over the size limit.
	CloseTooBig = 1009
)

// Close reasons sent with the codes above.
const (
	ReasonIdleTimeout  = "idle timeout"
	ReasonTokenExpired = "token expired"
	ReasonDisconnected = "disconnected"
	ReasonShutdown     = "server shutdown"
	ReasonSlowConsumer = "slow consumer"
	ReasonRateLimit    = "rate limit exceeded"
	ReasonInvalidUTF8  = "invalid UTF-8"
)
