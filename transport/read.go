package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
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
				c.hub.workers.run((*readTask)(c))
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

// readTask, writeTask and drainTask are a connection as the workers' task
// that reads it, writes its queue, or handles its inbox.
type (
	readTask  conn
	writeTask conn
	drainTask conn
)

func (t *readTask) run()  { (*conn)(t).serveReady() }
func (t *writeTask) run() { (*conn)(t).writeLoop() }
func (t *drainTask) run() { (*conn)(t).drainInbox() }

// serveReady is c's worker: it reads until the socket has nothing more and
// exits, unless woken meanwhile.
func (c *conn) serveReady() {
	for {
		if !c.quickRead() {
			c.pump()
		}
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
	if w.draining {
		c.drain()
		return
	}
	// gorilla's Conn is lent once a read has frames for it, and given back
	// after finish: a wake that reads nothing takes none.
	var ws *websocket.Conn
	defer func() {
		if ws != nil {
			c.giveBack()
		}
	}()
	limit := c.hub.readLimit()
	for !w.finished {
		if w.owed.Load() && !w.sock.closed() {
			// gorilla writes on the reader's side too (a close frame's
			// echo, a 1009), and its writes would land inside the frames
			// the writer is finishing: the reader waits, and the writer
			// wakes it when they are out.
			w.filled = w.in != nil && len(w.in.pending) > 0
			w.release()
			return
		}
		drained, err := false, error(nil)
		if w.filled {
			// What the quick path read and left: acted on before reading on.
			w.filled = false
		} else {
			drained, err = w.fill(int(limit) + readChunk)
		}
		if err == errAgain {
			if d := w.deadline.Load(); d == 0 || time.Now().UnixNano() < d {
				w.release()
				return
			}
			err = os.ErrDeadlineExceeded
		}
		if ws == nil {
			ws = c.lend()
		}
		if err == errTooBig {
			c.finish(c.tooBig())
			return
		}
		// The answers to what one read brought go out together.
		c.holdWrites()
		var rerr error
		for rerr == nil && w.in.next(limit) {
			rerr = c.readMessage(ws)
			if rerr == nil {
				rerr = w.in.drop()
			}
		}
		c.flushWrites()
		if rerr != nil {
			c.finish(rerr)
			return
		}
		if err != nil {
			if w.owed.Load() && !w.sock.closed() {
				continue // after the writer, as above; the socket's error stays
			}
			// gorilla reads what is left, then the socket's error.
			w.in.fed, w.in.rerr = w.in.pending, err
			c.readLoop(ws)
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
		c.w.SetReadDeadline(t)
		return
	}
	c.w.deadline.Store(t.UnixNano())
	c.hub.poller.expire(c, t)
}

// readLoop reads frames through ws, lent to c, until the socket fails or
// closes: the reader of a connection that is not polled.
func (c *conn) readLoop(ws *websocket.Conn) {
	var err error
	for err == nil {
		err = c.readMessage(ws)
	}
	c.finish(err)
}

// readMessage reads one message through ws, lent to c, which answers the
// control frames before it on the way, and acts on it. An error ends the
// connection.
func (c *conn) readMessage(ws *websocket.Conn) error {
	mt, r, err := ws.NextReader()
	if err != nil {
		return err
	}
	if c.w.synthetic() || c.stopped.Load() {
		// Our frame ending a unit of control frames, or a closing
		// connection reading on only to see the client's close frame.
		_, err = io.Copy(io.Discard, r)
		return err
	}
	if mt == websocket.BinaryMessage {
		n, err := io.Copy(io.Discard, r)
		if err != nil {
			return err
		}
		return c.message(mt, nil, n)
	}
	buf := messages.Get().(*bytes.Buffer)
	defer putMessage(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		return err
	}
	return c.message(mt, buf.Bytes(), int64(buf.Len()))
}

// message acts on a whole message of n bytes the client sent: data, or
// nil for a binary one, which is only a keepalive. Both the reader through
// gorilla and the quick path (quick.go) come here. An error ends the
// connection.
func (c *conn) message(mt int, data []byte, n int64) error {
	h := c.hub
	if c.stopped.Load() {
		return nil
	}
	c.touch()
	c.silenced.Store(false)
	if mt == websocket.BinaryMessage {
		h.m.kaBinary.Inc()
	} else {
		h.m.kaText.Inc()
	}
	tap(true, data) // nil for a binary message
	if n > h.maxMessage && (mt == websocket.BinaryMessage || !watchFrame(data)) {
		return c.tooBig()
	}
	if !c.admit(int(n)) || mt == websocket.BinaryMessage {
		return nil
	}
	if bytes.Equal(data, pingText) {
		c.deliver(inboxItem{frame: protocol.Ping{}})
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

// pingText is the ping as every client sends it: recognised by its bytes,
// it is a keepalive that costs no JSON decoding. Any other spelling of a
// ping goes through the parser and gets the same answer.
var pingText = []byte(`{"type":"ping"}`)

// messages hold a text message while it is parsed: deliver keeps nothing of
// it.
var messages = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putMessage pools buf unless a watch frame grew it past MaxMessage's size:
// those are rare and would keep their size in the pool.
func putMessage(buf *bytes.Buffer) {
	if buf.Cap() <= readChunk {
		messages.Put(buf)
	}
}

// watchAllowance is how far past MaxMessage a watch frame may go: the
// longest list the protocol takes of its longest IDs, each quoted and
// followed by a comma and a space. A watch frame is the one frame whose
// documented limit (MaxWatch IDs) is past the byte limit at the defaults;
// both readers read up to readLimit, and close any other frame over
// MaxMessage with 1009 once read.
const watchAllowance = protocol.MaxWatch * (protocol.MaxUIDLen + len(`"", `))

// readLimit is the largest message either reader reads: gorilla's read
// limit, and how far wire's scanner waits for a message to complete.
func (h *Hub) readLimit() int64 { return h.maxMessage + int64(watchAllowance) }

// watchFrame reports whether data is a frame of type watch, the way
// protocol.ParseClient reads the type.
func watchFrame(data []byte) bool {
	var head struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(data, &head) == nil && head.Type == "watch"
}

// tooBig sends 1009, as gorilla does for a message over its read limit, and
// returns the error that has finish drain and close the socket. Its caller
// has c's framer lent until after finish: a framer that sent a close frame
// must not be given back before c is closing.
func (c *conn) tooBig() error {
	ws := c.lend()
	defer c.giveBack()
	ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseMessageTooBig, ""), time.Now().Add(time.Second))
	return websocket.ErrReadLimit
}

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
		// 1009 is sent, but the rest of the frame may be unread; closing now
		// would reset the connection and could destroy the close frame
		// before the client reads it. Drain until the client hangs up.
		deadline := time.Now().Add(h.closeTimeout)
		if c.w.polled {
			// On the wakes of the socket and of the deadline, never by a
			// thread that waits: clients decide how often this happens.
			c.w.draining = true
			c.setReadDeadline(deadline)
			c.drain()
			return
		}
		c.w.Conn.SetReadDeadline(deadline)
		io.Copy(io.Discard, c.w.Conn)
	}
	c.shut()
}

// shut closes c's socket once its reader is done with it. What the client
// sent before it went is handled first; then c stops counting, its context
// ends and the Hub forgets it.
func (c *conn) shut() {
	c.w.Close()
	c.end(finished)
}

// drain reads and drops what a polled socket has, until the peer hangs up,
// the socket fails or the read deadline passes, and then shuts c. What the
// peer has not sent yet waits for the next wake: a readable edge, or the
// poller at the deadline.
func (c *conn) drain() {
	w := &c.w
	buf := chunks.Get().(*[]byte)
	defer chunks.Put(buf)
	for {
		n, err := w.sock.read((*buf)[:cap(*buf)])
		if err == nil && n > 0 {
			continue
		}
		if err == syscall.EAGAIN {
			if d := w.deadline.Load(); d != 0 && time.Now().UnixNano() < d {
				return
			}
		}
		break
	}
	w.draining = false
	c.shut()
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

// pong answers a ping, queued behind the frames that answer what the client
// sent before it, so a pong says those answers are on their way first.
func (c *conn) pong(data string) {
	if !c.enqueue(protocol.Encoded{Type: pongFrame, Data: []byte(data)}) {
		c.closeSlow()
	}
}

// pongFrame marks a queued WebSocket pong: no text frame has this type.
const pongFrame = "\x00pong"

func (c *conn) pongHandler(string) error {
	c.controlKeepalive(false)
	return nil
}
