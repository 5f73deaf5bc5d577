package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/presence"
)

// conn is one WebSocket: a key in the ring and a presence.Client.
//
// Write path: one goroutine writes at a time (gorilla's rule). It is started
// when the queue becomes non-empty and exits when it is empty again, so an
// idle connection parks only its reader goroutine. The queue is bounded by
// Hub.sendQueue; a client that falls that far behind is closed.
type conn struct {
	hub *Hub
	uid string
	ws  *websocket.Conn

	silenced atomic.Bool // control frames are not keepalives (demo aid)
	stopped  atomic.Bool // mirrors closing, for the reader's lock-free checks

	mu       sync.Mutex
	queue    [][]byte // outbound text frames; a nil item is a ping
	welcomed bool     // the welcome is queued; until then the writer waits
	writing  bool     // a writer goroutine owns the socket's write side
	closing  bool     // a close frame is due or sent: no more data frames
	closeMsg []byte   // the close frame to send, once
}

// Send queues a frame from the presence node. A connection whose queue is
// full is closed as a slow consumer, on a goroutine of its own: the node
// calls Send under its locks.
func (c *conn) Send(frame []byte) {
	c.hub.m.sent(frame)
	if !c.enqueue(frame) {
		c.hub.m.dropped.Inc()
		go c.closeWith(CloseSlowConsumer, "slow consumer", reasonSlow)
	}
}

// reply queues a frame answering one of the client's own.
func (c *conn) reply(frame []byte) {
	c.hub.m.sent(frame)
	if !c.enqueue(frame) {
		c.hub.m.dropped.Inc()
		c.closeWith(CloseSlowConsumer, "slow consumer", reasonSlow)
	}
}

// enqueue queues msg (nil: a ping) for the writer. It reports false if the
// queue is full; the caller then closes c as a slow consumer. Frames for a
// closing connection are dropped.
func (c *conn) enqueue(msg []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return true
	}
	if len(c.queue) >= c.hub.sendQueue {
		return false
	}
	c.queue = append(c.queue, msg)
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
	c.queue = nil
	c.closeMsg = websocket.FormatCloseMessage(code, reason)
	c.welcomed = true // a close needs no welcome before it
	if !c.writing {
		c.writing = true
		go c.writeLoop()
	}
	c.mu.Unlock()
	c.hub.m.closes.WithLabelValues(metric).Inc()
	c.hub.detach(c)
}

func (c *conn) writeLoop() {
	wt := c.hub.writeTimeout
	for {
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
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
				c.ws.NetConn().Close()
				c.mu.Lock()
				wasClosing := c.closing
				c.closing = true
				c.stopped.Store(true)
				c.queue, c.closeMsg = nil, nil
				c.mu.Unlock()
				if !wasClosing {
					reason := reasonClient
					if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
						reason = reasonSlow
					}
					c.hub.m.closes.WithLabelValues(reason).Inc()
				}
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
		if mt == websocket.BinaryMessage {
			h.m.kaBinary.Inc()
			if _, err = io.Copy(io.Discard, r); err != nil {
				break
			}
			continue
		}
		h.m.kaText.Inc()
		var data []byte
		if data, err = io.ReadAll(r); err != nil {
			break
		}
		c.handle(data)
	}
	c.finish(err)
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
		c.silenced.Store(true)
	case "join":
		if err := h.node.Join(c, in.Channel); err != nil {
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
	}
}

// finish runs when the reader stops: c no longer counts, leaves the ring and
// its socket is closed.
func (c *conn) finish(err error) {
	h := c.hub
	c.mu.Lock()
	wasClosing := c.closing
	c.closing = true
	c.stopped.Store(true)
	c.queue = nil
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
