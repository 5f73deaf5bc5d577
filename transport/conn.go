package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/presence"
)

// conn is one WebSocket: a key in the ring and a presence.Client.
//
// Write path: one goroutine writes at a time (gorilla's rule). It is started
// when the queue becomes non-empty and exits when it is empty again, so an
// idle connection parks only its reader goroutine. The queue is bounded in
// bytes by Hub.queueBytes; a client that falls that far behind is closed.
type conn struct {
	hub *Hub
	uid string
	ws  *websocket.Conn

	session Session   // owned by the reader goroutine after the upgrade
	rate    rateState // owned by the reader goroutine

	silenced  atomic.Bool  // control frames are not keepalives (demo aid)
	reprieved atomic.Int64 // the stall (UnixNano) after which its timeout was put off
	stopped   atomic.Bool  // mirrors closing, for the reader's lock-free checks

	mu       sync.Mutex
	queue    [][]byte // outbound text frames; a nil item is a ping
	queued   int      // bytes in queue
	welcomed bool     // the welcome is queued; until then the writer waits
	writing  bool     // a writer goroutine owns the socket's write side
	closing  bool     // a close frame is due or sent: no more data frames
	closeMsg []byte   // the close frame to send, once
}

// Send queues a frame from the presence node. A connection whose queue is
// full is closed as a slow consumer, on a goroutine of its own: the node
// calls Send under its locks.
func (c *conn) Send(frame []byte) {
	if !c.push(frame) {
		go c.closeSlow()
	}
}

// reply queues a frame answering one of the client's own.
func (c *conn) reply(frame []byte) {
	if !c.push(frame) {
		c.closeSlow()
	}
}

// push counts and queues frame, and reports false if the queue is full.
func (c *conn) push(frame []byte) bool {
	c.hub.m.sent(frame)
	if c.enqueue(frame) {
		return true
	}
	c.hub.m.dropped.Inc()
	return false
}

func (c *conn) closeSlow() { c.closeWith(CloseSlowConsumer, "slow consumer", reasonSlow) }

// Disconnect closes c with 4403 at the server's request, on a goroutine of
// its own: the node calls it under its locks.
func (c *conn) Disconnect() {
	go c.closeWith(CloseDisconnected, "disconnected", reasonKicked)
}

// allows reports whether c may join channel: its token's channels claim and
// the embedder's Authorize must both say yes.
func (c *conn) allows(channel string) bool {
	return c.session.Allows(channel) && (c.hub.authorize == nil || c.hub.authorize(c.uid, channel))
}

// expireAt arms the close of c when its session expires; a zero time never.
func (c *conn) expireAt(t time.Time) {
	if t.IsZero() {
		c.hub.expiry.Remove(c)
		return
	}
	c.hub.expiry.TouchFor(c, time.Until(t))
}

// errNotAllowed answers a join the token or the embedder refused.
const errNotAllowed = "not allowed to join this channel"

// enqueue queues msg (nil: a ping) for the writer. It reports false if the
// queue is full; the caller then closes c as a slow consumer. Frames for a
// closing connection are dropped.
func (c *conn) enqueue(msg []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return true
	}
	if c.queued+len(msg) > c.hub.queueBytes {
		return false
	}
	c.queue = append(c.queue, msg)
	c.queued += len(msg)
	c.startWriterLocked()
	return true
}

func (c *conn) startWriterLocked() {
	if c.welcomed && !c.writing {
		c.writing = true
		go c.writeLoop()
	}
}

// sendWelcome puts the welcome first in the queue, ahead of broadcasts that
// arrived while it was being built, and lets the writer start.
func (c *conn) sendWelcome(msg []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closing {
		c.queue = append([][]byte{msg}, c.queue...)
		c.queued += len(msg)
	}
	c.welcomed = true
	c.startWriterLocked()
}

// closeWith starts closing c with a close frame, sent by the writer after the
// frame in flight; queued data is dropped. c stops counting for presence at
// once. Idempotent.
func (c *conn) closeWith(code int, reason, metric string) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.stopped.Store(true)
	c.queue, c.queued = nil, 0
	c.closeMsg = websocket.FormatCloseMessage(code, reason)
	c.welcomed = true // a close needs no welcome before it
	// Counted before the close frame can reach the client.
	c.hub.m.closes.WithLabelValues(metric).Inc()
	if !c.writing {
		c.writing = true
		go c.writeLoop()
	}
	c.mu.Unlock()
	c.hub.detach(c)
}

func (c *conn) writeLoop() {
	wt := c.hub.writeTimeout
	for {
		c.mu.Lock()
		batch := c.queue
		c.queue, c.queued = nil, 0
		if len(batch) == 0 {
			closeMsg := c.closeMsg
			c.closeMsg = nil
			if closeMsg == nil {
				c.writing = false
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			c.writeClose(closeMsg)
			continue // closing: nothing more is queued, the loop ends
		}
		c.mu.Unlock()
		for _, msg := range batch {
			if c.stopped.Load() {
				break
			}
			var err error
			if msg == nil {
				err = c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(wt))
			} else {
				c.ws.SetWriteDeadline(time.Now().Add(wt))
				err = c.ws.WriteMessage(websocket.TextMessage, msg)
			}
			if err != nil {
				// A client that cannot take one frame within the deadline is
				// too slow, else it is gone: either way drop the socket, the
				// reader finishes the rest.
				c.hub.log.Debug("transport: write failed", "uid", c.uid, "err", err)
				c.mu.Lock()
				wasClosing := c.closing
				c.closing = true
				c.stopped.Store(true)
				c.queue, c.queued, c.closeMsg = nil, 0, nil
				c.mu.Unlock()
				if !wasClosing { // counted before the reader can see the socket gone
					reason := reasonClient
					if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
						reason = reasonSlow
					}
					c.hub.m.closes.WithLabelValues(reason).Inc()
				}
				c.ws.NetConn().Close()
				break
			}
		}
	}
}

// writeClose sends a close frame and bounds how long the reader waits for
// the client's answer before the socket is dropped.
func (c *conn) writeClose(msg []byte) {
	c.ws.SetReadDeadline(time.Now().Add(c.hub.closeTimeout))
	if err := c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.hub.writeTimeout)); err != nil {
		c.ws.NetConn().Close()
	}
}

// touch counts an inbound frame as a keepalive.
func (c *conn) touch() {
	if !c.stopped.Load() {
		c.hub.tracker.Touch(c)
	}
}

// readLoop reads frames until the socket fails or closes, on the goroutine
// of the HTTP handler that upgraded it.
func (c *conn) readLoop() {
	h := c.hub
	var err error
	for {
		var mt int
		var r io.Reader
		mt, r, err = c.ws.NextReader()
		if err != nil {
			break
		}
		if c.stopped.Load() {
			// Closing: read on only to see the client's close frame.
			if _, err = io.Copy(io.Discard, r); err != nil {
				break
			}
			continue
		}
		c.touch()
		c.silenced.Store(false)
		var data []byte
		var n int64
		if mt == websocket.BinaryMessage {
			h.m.kaBinary.Inc()
			n, err = io.Copy(io.Discard, r)
		} else {
			h.m.kaText.Inc()
			data, err = io.ReadAll(r)
			n = int64(len(data))
		}
		if err != nil {
			break
		}
		if !c.admit(int(n)) || mt == websocket.BinaryMessage {
			continue
		}
		if !utf8.Valid(data) {
			c.closeWith(websocket.CloseInvalidFramePayloadData, "invalid UTF-8", reasonInvalid)
			continue
		}
		c.handle(data)
	}
	c.finish(err)
}

// admit applies the inbound limits to a frame of size bytes and reports
// whether to act on it. The first frame over the limit gets an error frame;
// a connection that stays over it is closed.
func (c *conn) admit(size int) bool {
	switch c.rate.check(&c.hub.limits, time.Now(), size) {
	case accept:
		return true
	case cutOff:
		c.closeWith(websocket.ClosePolicyViolation, "rate limit exceeded", reasonFlood)
	default:
		if c.rate.refused == 1 {
			c.reply(errorMsg("too many messages: slow down, this one was dropped", ""))
		}
	}
	return false
}

// handle acts on one text frame. Whatever the client sent, the answer is a
// frame; a bad one gets an error frame and the connection stays open.
func (c *conn) handle(data []byte) {
	h := c.hub
	in, err := parseFrame(data)
	if err != nil {
		c.reply(errorMsg(err.Error(), ""))
		return
	}
	switch in.Type {
	case "ping":
		c.reply(pongMsg)
	case "silence":
		if !h.demo {
			c.reply(errorMsg(`"silence" is a demo aid, accepted only in demo mode`, ""))
			return
		}
		c.silenced.Store(true)
	case "join":
		if !c.allows(in.Channel) {
			c.reply(errorMsg(errNotAllowed, in.Channel))
		} else if err := h.node.Join(c, in.Channel); err != nil {
			c.reply(errorMsg(err.Error(), in.Channel))
		}
	case "leave":
		if err := h.node.Leave(c, in.Channel); err != nil {
			c.reply(errorMsg(err.Error(), in.Channel))
		}
	case "watch":
		if err := h.node.Watch(c, in.UIDs); err != nil {
			c.reply(errorMsg(err.Error(), ""))
		}
	case "refresh":
		if err := c.refresh(in.Token); err != nil {
			c.reply(errorMsg(err.Error(), ""))
		}
	case "chat":
		h.m.chats.Inc()
		ctx, cancel := context.WithTimeout(context.Background(), h.writeTimeout)
		err := h.node.Chat(ctx, c, in.Channel, in.Text)
		cancel()
		switch {
		case errors.Is(err, presence.ErrNotJoined):
			c.reply(errorMsg(err.Error(), in.Channel))
		case err != nil:
			h.log.Warn("transport: publish chat", "uid", c.uid, "err", err)
			c.reply(errorMsg("chat not delivered: "+err.Error(), in.Channel))
		}
	default: // a type of the application's
		if h.onMessage == nil {
			c.reply(errorMsg(fmt.Sprintf("unknown type %q", truncate(in.Type)), ""))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.writeTimeout)
		err := h.onMessage(ctx, c.uid, in.Type, data)
		cancel()
		if err != nil {
			c.reply(errorMsg(err.Error(), ""))
		}
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
	c.session = s
	c.expireAt(s.Expires)
	return nil
}

// finish runs when the reader stops: c no longer counts, leaves the ring and
// its socket is closed.
func (c *conn) finish(err error) {
	h := c.hub
	c.mu.Lock()
	wasClosing := c.closing
	c.closing = true
	c.stopped.Store(true)
	c.queue, c.queued = nil, 0
	c.mu.Unlock()
	tooBig := errors.Is(err, websocket.ErrReadLimit)
	if !wasClosing {
		reason := reasonClient
		if tooBig {
			reason = reasonTooBig
		}
		h.m.closes.WithLabelValues(reason).Inc()
	}
	h.detach(c)
	h.tracker.Remove(c)
	h.expiry.Remove(c)
	nc := c.ws.NetConn()
	if tooBig {
		// gorilla has sent 1009, but the rest of the frame is unread; closing
		// now would reset the connection and could destroy the close frame
		// before the client reads it. Drain until the client hangs up.
		nc.SetReadDeadline(time.Now().Add(h.closeTimeout))
		io.Copy(io.Discard, nc)
	}
	nc.Close()
	h.mu.Lock()
	delete(h.live, c)
	h.live = shrink.Map(h.live, &h.livePeak)
	h.releaseLocked(c.uid)
	h.mu.Unlock()
	h.m.connections.Dec()
	h.readers.Done()
}

// detach stops counting c for presence: its user and channels lose it, and
// it hears of nothing more. Idempotent.
func (h *Hub) detach(c *conn) {
	h.node.Disconnect(c)
}

// controlKeepalive counts a ping or pong frame, unless the client asked for
// silence.
func (c *conn) controlKeepalive(ping bool) {
	if c.silenced.Load() {
		return
	}
	c.touch()
	// Counted after the touch: tests read the counter to know it happened.
	if ping {
		c.hub.m.kaPing.Inc()
	} else {
		c.hub.m.kaPong.Inc()
	}
}

// pingHandler answers a client's ping like gorilla's default handler does,
// after counting it as a keepalive.
func (c *conn) pingHandler(data string) error {
	c.controlKeepalive(true)
	if !c.admit(len(data)) {
		return nil // no pong for a ping over the limit
	}
	err := c.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.hub.writeTimeout))
	var ne net.Error
	if err == nil || errors.Is(err, websocket.ErrCloseSent) || (errors.As(err, &ne) && ne.Timeout()) {
		return nil
	}
	return err
}

func (c *conn) pongHandler(string) error {
	c.controlKeepalive(false)
	return nil
}
