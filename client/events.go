package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/presenced/presenced/protocol"
)

// ConnState is the state of a Client's connection.
type ConnState string

// Connection states, in the order a Client goes through them.
const (
	Connecting ConnState = "connecting" // dialing, or live but not yet joined again
	Live       ConnState = "live"       // joined and watching: calls go out at once
	Waiting    ConnState = "waiting"    // the connection ended; reconnecting after a backoff
	Closed     ConnState = "closed"     // stopped for good: Close, or a close that is not retried
)

// StateChange is the event a Client sends on Events when its connection
// changes state. It is not a frame of the protocol; its Type is "state".
type StateChange struct {
	State ConnState
	// Code is the close code the server ended the last connection with, if
	// it sent one (Waiting, Closed).
	Code int
	// Err is why the last connection or attempt ended (Waiting), or why
	// the Client stopped (Closed).
	Err error
	// Delay is the backoff before the next attempt (Waiting).
	Delay time.Duration
}

// Type returns "state".
func (*StateChange) Type() string { return "state" }

var _ protocol.Frame = (*StateChange)(nil)

// ErrClosed is returned by calls on a Client that Close stopped.
var ErrClosed = errors.New("client: closed")

// CloseError is how the server ended a connection (a close code) or
// refused one (an HTTP status). StateChange.Err carries one for a close the
// Client retries; Err returns one when the Client stopped for good: 4401
// with no new token, 4403, or a handshake refused with 400, 401 (no new
// token), 403 or 404.
type CloseError struct {
	Code   int    // the close code, or 0 for a refused handshake
	Status int    // the HTTP status of a refused handshake, or 0
	Reason string // the close reason, or the body of the refusal
}

func (e *CloseError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("client: server refused the connection: HTTP %d %s", e.Status, e.Reason)
	}
	return fmt.Sprintf("client: server closed the connection: %d %s", e.Code, e.Reason)
}

// ServerError is an error frame the server sent in answer to a call.
type ServerError struct {
	Message string // the server's words
	Channel string // the channel the refused frame named, if any
}

func (e *ServerError) Error() string {
	if e.Channel != "" {
		return fmt.Sprintf("client: server refused (channel %s): %s", e.Channel, e.Message)
	}
	return "client: server refused: " + e.Message
}

// ErrProtocol is wrapped by the errors about frames the server should not
// have sent: a first frame that is not a welcome, a second welcome, or a
// snapshot or page that contradicts itself or the request it answers.
// Frames like these are never applied to the state.
var ErrProtocol = errors.New("client: the server broke the protocol")

// errConnLost fails the calls waiting on a connection that ended; they
// try again on the next one.
var errConnLost = errors.New("client: connection lost")
