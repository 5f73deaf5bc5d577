package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// The read side of a connection. A polled connection is read by a worker
// that exists only while its socket has something to read (serveReady);
// any other by a goroutine parked in read for the connection's life
// (readLoop). Either is the connection's one reader.

// wake starts c's worker, or makes the running one read again before it
// exits: the poller calls it when c's socket becomes readable, and so does
// whatever closes the socket or sets a read deadline.
func (c *conn) wake() {
	for {
		switch c.w.state.Load() {
		case idle:
			if c.w.state.CompareAndSwap(idle, running) {
				c.hub.workers.do(c.serveReady)
				return
			}
		case running:
			if c.w.state.CompareAndSwap(running, again) {
				return
			}
		default:
			return
		}
	}
}

// serveReady is c's worker: it reads until the socket has nothing more and
// exits, unless woken meanwhile.
func (c *conn) serveReady() {
	for {
		c.pump()
		if c.w.state.CompareAndSwap(running, idle) {
			return
		}
		c.w.state.Store(running)
	}
}

// pump reads everything c's socket has without blocking and acts on every
// whole unit of frames in it; what is left of a frame waits in pending for
// the next wake. A closed or failed socket, or a read deadline passed while
// nothing came, ends c.
func (c *conn) pump() {
	w := &c.w
	limit := c.hub.maxMessage
	for !w.finished {
		drained, err := w.fill(int(limit) + readChunk)
		if err == errAgain {
			if d := w.deadline.Load(); d == 0 || time.Now().UnixNano() < d {
				w.release()
				return
			}
			err = os.ErrDeadlineExceeded
		}
		if err == errTooBig {
			c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseMessageTooBig, ""), time.Now().Add(time.Second))
			c.finish(websocket.ErrReadLimit)
			return
		}
		for w.in.next(limit) {
			rerr := c.readMessage()
			if rerr == nil {
				rerr = w.in.drop()
			}
			if rerr != nil {
				c.finish(rerr)
				return
			}
		}
		if err != nil {
			// gorilla reads what is left, then the socket's error.
			w.in.fed, w.in.rerr = w.in.pending, err
			c.readLoop()
			return
		}
		if drained && !w.hup.Load() {
			// A read that did not fill the buffer took all the socket had;
			// what comes after it is a new edge, and a new wake. A hang-up
			// comes with the edge of the data before it: only a read sees it.
			w.release()
			return
		}
	}
}

// closeSocket closes c's socket; its reader then finishes c.
func (c *conn) closeSocket() {
	c.w.Close()
	if c.w.polled {
		c.wake()
	}
}

// setReadDeadline bounds the wait for c's next frame, as
// net.Conn.SetReadDeadline does for a parked reader.
func (c *conn) setReadDeadline(t time.Time) {
	if !c.w.polled {
		c.ws.SetReadDeadline(t)
		return
	}
	c.w.deadline.Store(t.UnixNano())
	c.hub.poller.expire(c, t)
}

// readLoop reads frames until the socket fails or closes: the reader of a
// connection that is not polled.
func (c *conn) readLoop() {
	var err error
	for err == nil {
		err = c.readMessage()
	}
	c.finish(err)
}

// readMessage reads one message through gorilla, which answers the control
// frames before it on the way, and acts on it. An error ends the
// connection.
func (c *conn) readMessage() error {
	h := c.hub
	mt, r, err := c.ws.NextReader()
	if err != nil {
		return err
	}
	if c.w.synthetic() || c.stopped.Load() {
		// Our frame ending a unit of control frames, or a closing
		// connection reading on only to see the client's close frame.
		_, err = io.Copy(io.Discard, r)
		return err
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
		buf := messages.Get().(*bytes.Buffer)
		defer messages.Put(buf)
		buf.Reset()
		n, err = buf.ReadFrom(r)
		data = buf.Bytes()
	}
	if err != nil {
		return err
	}
	tap(true, data) // nil for a binary message
	if !c.admit(int(n)) || mt == websocket.BinaryMessage {
		return nil
	}
	if !utf8.Valid(data) {
		c.closeWith(protocol.CloseInvalidPayload, protocol.ReasonInvalidUTF8, reasonInvalid)
		return nil
	}
	f, err := protocol.ParseClient(data)
	if err != nil {
		c.deliver(inboxItem{err: err.Error(), payload: namedChannel(data)})
		return nil
	}
	if _, ok := f.(protocol.Silence); ok && c.hub.demo {
		// The reader's own business: it counts the keepalives.
		c.silenced.Store(true)
	}
	c.deliver(inboxItem{frame: f})
	return nil
}

// namedChannel returns the "channel" of a frame that could not be parsed,
// as sent, when it is a string: the error frame names it, so a client with
// several joins in flight can tell which one failed.
func namedChannel(data []byte) string {
	var f struct {
		Channel string `json:"channel"`
	}
	if json.Unmarshal(data, &f) != nil {
		return ""
	}
	return f.Channel
}

// messages hold a text message while it is parsed: deliver keeps nothing of
// it.
var messages = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// finish runs when the reader stops: c's socket is closed, and once the
// frames it sent are handled, c no longer counts and its context ends.
func (c *conn) finish(err error) {
	h := c.hub
	tooBig := errors.Is(err, websocket.ErrReadLimit)
	reason := reasonClient
	if tooBig {
		reason = reasonTooBig
	}
	c.mu.Lock()
	c.markClosingLocked(reason)
	c.mu.Unlock()
	if c.w.polled {
		c.w.finished = true
		c.w.discard()
	}
	if tooBig {
		// gorilla has sent 1009, but the rest of the frame is unread; closing
		// now would reset the connection and could destroy the close frame
		// before the client reads it. Drain until the client hangs up.
		deadline := time.Now().Add(h.closeTimeout)
		if c.w.polled {
			c.w.sock.drain(deadline)
		} else {
			c.w.Conn.SetReadDeadline(deadline)
			io.Copy(io.Discard, c.w.Conn)
		}
	}
	c.w.Close()
	// What the client sent before it went is handled first; then c stops
	// counting, its context ends and the Hub forgets it.
	c.end(finished)
}

// controlKeepalive counts a ping or pong frame, unless the client asked for
// silence.
func (c *conn) controlKeepalive(ping bool) {
	if c.silenced.Load() {
		return
	}
	c.touch()
	// Counted after the touch, so a reader of the counter knows it happened.
	if ping {
		c.hub.m.kaPing.Inc()
	} else {
		c.hub.m.kaPong.Inc()
	}
}

// pingHandler counts a client's ping as a keepalive and answers it like
// gorilla's default handler does, in its turn: a pong tells the client that
// the server has handled every frame it sent before the ping.
func (c *conn) pingHandler(data string) error {
	c.controlKeepalive(true)
	if !c.admit(len(data)) {
		return nil // no pong for a ping over the limit
	}
	c.deliver(inboxItem{pong: true, payload: data})
	return nil
}

// pong answers a ping. A pong that cannot be written is no error of the
// reader's: a failed socket ends the connection through the writer or the
// reader's next read.
func (c *conn) pong(data string) {
	err := c.ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.hub.writeTimeout))
	if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
		c.hub.log.Debug("transport: pong not written", "uid", c.uid, "err", err)
	}
}

func (c *conn) pongHandler(string) error {
	c.controlKeepalive(false)
	return nil
}
