package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/queue"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// conn is one WebSocket: a presence.Client.
//
// Concurrency follows gorilla's rule, one reader and one writer, plus one
// handler. The reader (reader.go) owns rate: on a polled connection (the
// default on Linux) it is a worker that exists while the socket has frames
// to read (serveReady), elsewhere a goroutine parked in read for the
// connection's life (readLoop). The handler owns session: it is whoever
// drains the inbox (see inbox.go), the reader itself for a frame that
// cannot wait while the inbox is idle, else a worker, one at a time. The
// writer (writer.go) runs on a worker from when the queue becomes non-empty
// until it is empty again, so an idle polled connection holds no goroutine
// at all. The
// queue is bounded in bytes by Hub.queueBytes; a client that falls that far
// behind is closed.
//
// Lock order: c.mu, then the Hub's workers' lock; the inbox's lock is a
// leaf, never held while a frame is handled.
type conn struct {
	hub *Hub
	uid string
	fr  *framer // gorilla's Conn, while lent (framer.go); under mu
	w   wire    // the socket, as gorilla sees it through fr
	// life is the connection's context, which ends when it closes: it
	// exists only for OnMessage. The Hub's own waits are bounded by
	// timeouts instead: a context derived from it would leave it a map of
	// children for the life of the connection.
	life *lifetime

	// session is nil when it limits nothing but the user ID (demo mode, a
	// token without claims), so such connections keep none.
	session *Session  // owned by the handler after the upgrade
	rate    rateState // owned by the reader
	inbox   queue.Queue[inboxItem]

	sse *sseStream // a Server-Sent Events connection's stream (sse.go); nil on a WebSocket

	silenced atomic.Bool // control frames are not keepalives (demo aid)
	stopped  atomic.Bool // mirrors closing, for the reader's lock-free checks

	// The fields are laid out for size: every idle connection holds one of
	// these, and the struct sits just under an allocation size class.
	mu       lockorder.Mutex[lockorder.Conn]
	queue    []protocol.Encoded // outbound text frames; one with nil Data is a ping, one of type pongFrame a pong
	closeMsg *[]byte            // the close frame to send, once
	welcomed bool               // the welcome is queued; until then the writer waits
	writing  bool               // a writer goroutine, or the reader writing pongs, owns the socket's write side
	held     bool               // the reader writes what its acts queue when it is done (holdWrites)
	closing  bool               // a close frame is due or sent: no more data frames
	queued   int32              // bytes in queue, at most Hub.queueBytes
}

// lifetime is a connection's context and what ends it.
type lifetime struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// readTask, writeTask and drainTask are a connection as the workers' task
// that reads it, writes its queue, or handles its inbox.
type (
	readTask  conn
	writeTask conn
	drainTask conn
)

// sess is the session c's user signed in with, or refreshed to.
func (c *conn) sess() Session {
	if c.session == nil {
		return Session{UID: c.uid}
	}
	return *c.session
}

func (c *conn) setSession(s Session) {
	if s.Expires.IsZero() && s.Channels == nil && s.Watch == nil && s.Info == nil {
		c.session = nil
		return
	}
	c.session = &s
}

// Info is the info c's user signed in with, for the presence node.
func (c *conn) Info() json.RawMessage {
	if c.session == nil {
		return nil
	}
	return c.session.Info
}

// Probe pings a connection silent for half the timeout: browsers answer a
// ping even from a background tab whose timers are throttled.
// A stream has no ping a client answers by itself: its client's POSTs are
// the only keepalives.
func (c *conn) Probe() {
	if c.sse == nil {
		c.enqueue(protocol.Encoded{})
	}
}

// Close closes c with code at the node's request: a timeout, an expired
// token or a disconnect.
func (c *conn) Close(code int, reason string) {
	metric := reasonClient
	switch code {
	case protocol.CloseIdleTimeout:
		metric = reasonIdle
	case protocol.CloseTokenExpired:
		metric = reasonExpired
	case protocol.CloseDisconnected:
		metric = reasonKicked
	}
	c.closeWith(code, reason, metric)
}

// reply queues a frame answering one of the client's own.
func (c *conn) reply(f protocol.Frame) {
	if !c.push(protocol.MustEncode(f)) {
		c.closeSlow()
	}
}

// replyError answers a frame with an error frame.
func (c *conn) replyError(msg, channel string) {
	c.reply(protocol.Error{Error: msg, Channel: channel})
}

// handedOver answers a chat or typing frame the engine did not take.
func (c *conn) handedOver(it inboxItem, what, channel string, ref json.RawMessage, err error) {
	switch {
	case err == nil:
	case errors.Is(err, presence.ErrNotJoined):
		c.failed(it, err.Error(), channel, ref)
	default:
		c.hub.log.Warn("transport: "+what+" not delivered", "uid", c.uid, "channel", channel, "err", err)
		c.failed(it, what+" not delivered: "+err.Error(), channel, ref)
	}
}

// refresh extends c's session with a newer token for the same user.
func (c *conn) refresh(token string) error {
	sa, ok := c.hub.auth.(SessionAuthenticator)
	if !ok {
		return errors.New("refresh needs a server that authenticates with tokens")
	}
	s, err := sa.Refresh(token)
	if err != nil {
		return fmt.Errorf("refresh refused: %w", err)
	}
	if s.UID != c.uid {
		return errors.New("refresh refused: the token is for another user")
	}
	if s.Info == nil {
		s.Info = c.Info() // a token without info clears nothing
	} else if !bytes.Equal(s.Info, c.Info()) {
		if err := c.hub.node.SetInfo(c, s.Info); err != nil {
			return err
		}
	}
	c.setSession(s)
	c.hub.node.SetExpiry(c, s.Expires)
	// A narrower token narrows the connection now: it leaves the channels
	// the new one does not allow, with a left frame, and its diff goes out
	// at this tick.
	for _, ch := range c.hub.node.Joined(c) {
		if !c.hub.mayJoin(s, ch) {
			if err := c.hub.node.Leave(c, ch); err != nil {
				return err
			}
		}
	}
	return nil
}

// newConn makes the conn of a connection about to open, for sess, or
// answers 503 or 429 and reports false when the node or the user holds all
// the connections it may. The caller releases its count if it does not go
// on to open it.
func (h *Hub) newConn(w http.ResponseWriter, sess Session, channels []string) (*conn, Session, []string, bool) {
	// Copies: a name parsed from the query would keep the whole request
	// line alive for as long as the connection.
	uid := strings.Clone(sess.UID)
	sess.UID = uid
	for i, ch := range channels {
		channels[i] = strings.Clone(ch)
	}
	switch h.reserve(uid) {
	case nodeFull:
		h.m.connsRefused[nodeFull].Inc()
		w.Header().Set("Retry-After", retryAfterFull)
		w.Header().Set("Connection", "close") // its descriptor is what is short
		writeError(w, http.StatusServiceUnavailable, "this server holds all the connections it may (-max-conns): try again later")
		return nil, sess, nil, false
	case userFull:
		h.m.connsRefused[userFull].Inc()
		writeError(w, http.StatusTooManyRequests, "too many connections for this user")
		return nil, sess, nil, false
	}
	c := &conn{hub: h, uid: uid}
	c.inbox.Limit = inboxLimit
	c.setSession(sess)
	if h.onMessage != nil {
		ctx, cancel := context.WithCancel(context.Background())
		c.life = &lifetime{ctx, cancel}
	}
	return c, sess, channels, true
}

// refusedClosingLocked reports whether the Hub is shutting down, and then
// drops c. Called with h.mu held.
func (h *Hub) refusedClosingLocked(c *conn) bool {
	if h.closing {
		h.dropLocked(c)
	}
	return h.closing
}

// dropLocked lets go of c, made by newConn and never opened: its count and
// its context. Called with h.mu held.
func (h *Hub) dropLocked(c *conn) {
	h.releaseLocked(c.uid)
	if c.life != nil {
		c.life.cancel()
	}
}

// open counts c, just registered, with the node in the channels sess may
// join, refusing the others with an error frame, and queues its welcome
// (naming session, for a stream).
func (c *conn) open(sess Session, channels []string, session string) {
	h := c.hub
	var refused []string
	channels = slices.DeleteFunc(channels, func(ch string) bool {
		if !h.mayJoin(sess, ch) {
			refused = append(refused, ch)
			return true
		}
		return false
	})
	// Armed first, so a refused Connect's close also disarms it.
	h.node.SetExpiry(c, sess.Expires)
	ctx, cancel := context.WithTimeout(context.Background(), h.followWait())
	err := h.node.Connect(ctx, c, c.uid, channels)
	cancel()
	if err != nil {
		c.closeWith(protocol.CloseGoingAway, protocol.ReasonShutdown, reasonShutdown)
	}
	for _, ch := range refused {
		c.replyError(errNotAllowed, ch)
	}
	// The welcome goes out only now, first in the queue, ahead of the
	// snapshots: a client that has its welcome is online, and counted in
	// its channels.
	own := h.node.RecordOf(c.uid)
	c.sendWelcome(protocol.MustEncode(protocol.Welcome{UID: c.uid, TimeoutMS: h.Timeout().Milliseconds(),
		Protocol: protocol.Version, Mode: own.Mode, Note: own.Note, Session: session}))
}
