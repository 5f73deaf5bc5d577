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
	// starts at MinBackoff, doubles with each failed attempt up to
	// MaxBackoff, and is jittered down by up to half. 0 means 500 ms and
	// 15 s.
	MinBackoff, MaxBackoff time.Duration
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
