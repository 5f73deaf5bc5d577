package client

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// Options configure a Client. The zero value connects in demo mode with no
// user ID, which the server refuses: set UID (demo mode) or Token.
type Options struct {
	// UID is the user ID a server in demo mode trusts (sent as ?uid=).
	UID string
	// Token is a JWT for a server that authenticates with tokens, sent as
	// "Authorization: Bearer".
	Token string
	// RefreshToken, if set, returns a newer token for the same user. The
	// Client calls it before the current token's "exp" and sends the new
	// token to the server, and calls it when the server refuses the token
	// (HTTP 401, or close 4401) to reconnect with the new one. An error or
	// an empty token means there is none: the Client tries again later
	// before exp, and stops after a refusal.
	RefreshToken func(ctx context.Context) (string, error)
	// Channels are joined at connect; Dial returns once their snapshots
	// came, and fails if the server refuses one of them.
	Channels []string
	// Header is sent with every WebSocket handshake (Origin, cookies, ...).
	Header http.Header

	// Dialer makes the WebSocket connections; nil means one with a 10 s
	// handshake timeout.
	Dialer *websocket.Dialer
	// MinBackoff and MaxBackoff bound the wait before a reconnect: it
	// starts at MinBackoff, doubles with each attempt up to MaxBackoff,
	// and is jittered down by up to half. It starts over only after a
	// connection that stayed live for 10 s: a server that accepts and then
	// drops at once (after the welcome, say) sees the waits grow as it
	// would if it refused. 0 means 500 ms and 15 s.
	MinBackoff, MaxBackoff time.Duration
	// ReadLimit is the largest frame the Client accepts from the server, in
	// bytes; 0 or less means DefaultReadLimit. A bigger frame ends the
	// connection (close 1009) before the Client reads it, and the Client
	// reconnects as after any other loss. The largest frames presenced
	// sends are a joined snapshot (about 70 bytes per member of the
	// server's -member-list) and what the application publishes: raise it
	// for a -member-list above some 50,000.
	ReadLimit int64
	// EventBuffer is the capacity of the Events channel; 0 means 256. When
	// it is full, a data event (a chat, publish or message; see Events)
	// waits for room, and the Client reads no more from the server
	// meanwhile; other events are dropped, never the state.
	EventBuffer int
	// PageLimit is the members a LoadMembers page asks for; 0 means
	// protocol.MaxPageLimit.
	PageLimit int
	// Logger receives the Client's debug and warning lines; nil is silent.
	Logger *slog.Logger
}

// DefaultReadLimit is the ReadLimit of Options that set none.
const DefaultReadLimit = 4 << 20

const (
	defaultMinBackoff  = 500 * time.Millisecond
	defaultMaxBackoff  = 15 * time.Second
	defaultEventBuffer = 256
	handshakeTimeout   = 10 * time.Second
	writeTimeout       = 10 * time.Second
)

// minReadTimeout bounds from below how long a connection may bring nothing
// before the Client drops it (else twice the server's timeout). A variable
// only so that tests can shorten it.
var minReadTimeout = 10 * time.Second

// stableAfter is how long a connection must have been live for the next
// reconnect to start the backoff over: as long as the JavaScript client's,
// so both treat a flapping server alike. A variable only so that tests can
// shorten it.
var stableAfter = 10 * time.Second

// Bounds on the server's timeout (the welcome's timeout_ms) as the Client
// uses it: the app pings go out every third of it, so a timeout of a
// millisecond would make the Client flood the server, and one of years
// would make it never notice a dead connection.
const (
	minServerTimeout = 300 * time.Millisecond
	maxServerTimeout = 10 * time.Minute
)

// maxCount is the largest member or typist count the Client believes: a
// count above it comes from a broken server, not a real channel.
const maxCount = 1_000_000_000
