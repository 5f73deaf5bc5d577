package transport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// The reader: the one goroutine at a time that reads a connection's
// socket, with what only it touches (rate, and wire's in, filled,
// draining and finished). A polled connection is read by a worker that
// exists only while its socket has something to read (serveReady); any
// other by a goroutine parked in gorilla's read for the connection's life
// (readLoop).
//
// Its rules, and where it meets the writer (writer.go):
//   - One reader: wake starts the worker, or has the running one read
//     again before it exits (wire.state), so no readiness is missed.
//   - The quick path first: what a polled socket has when it wakes is,
//     almost always, one {"type":"ping"} and nothing else. quickRead
//     answers it without gorilla's reader (which allocates one per
//     message) and, when the writer is idle, without the writer: the pong
//     goes out from pre-encoded bytes in the same turn. Anything else it
//     read (another frame, part of one, more than a read holds, a hang-up)
//     goes to pump, with the bytes read so far first (filled).
//   - gorilla's Conn is lent (framer.go) only once a read has frames for
//     it, and given back after finish: it changes hands between messages.
//   - The answers to one read are held (holdWrites) until it is handled
//     (flushWrites), so that its pongs leave in one write(2). What the
//     socket did not take of them is owed to the writer (wire.owed), and
//     until the writer has paid it the reader hands gorilla nothing:
//     gorilla writes on the reader's side too (a close echoed, a 1002, a
//     1009), and its frames would land inside the pongs.
//   - Finishing: finish marks c closing and closes the socket; after a
//     1009 only once the client has hung up or CloseTimeout has passed,
//     draining meanwhile on the poller's wakes, never in a blocking wait
//     (drain). Whatever else ends c closes the socket (closeSocket), and
//     the reader, woken, finishes.
//
// The poller's goroutine does not take the quick path itself: it must wake
// every connection and arm the close deadlines, and answering pings too
// left it behind on both (docs/floor.md, "Tried and dropped").

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

// quickRead reads c's socket once and, if it held only whole pings that
// drained it, acts on them and reports true: c has no read buffer left.
// Otherwise it reports false and pump must read on.
func (c *conn) quickRead() bool {
	w := &c.w
	if w.draining || w.finished || w.in != nil || c.stopped.Load() || c.hub.maxMessage < int64(len(pingText)) {
		return false // a ping over MaxMessage closes with 1009: the worker's to do
	}
	drained, err := w.fill(int(c.hub.readLimit()) + readChunk)
	if err != nil {
		return false // the worker reads again and sees it
	}
	if !drained || w.hup.Load() || !onlyPings(w.in.pending) {
		w.filled = true
		return false
	}
	n := len(w.in.pending) / len(maskedPing)
	c.holdWrites()
	for range n {
		// Nothing a ping within MaxMessage leads to fails the read: a
		// flood is closed with its code by admit.
		c.message(websocket.TextMessage, pingText, int64(len(pingText)))
	}
	c.flushWrites()
	w.in.pending = w.in.pending[:0]
	w.release()
	return true
}

// maskedPing is the frame a client sends {"type":"ping"} in, any mask key
// but this one: FIN and text, masked, 15 bytes.
var maskedPing = append([]byte{0x81, 0x80 | byte(len(pingText)), 0, 0, 0, 0}, pingText...)

// onlyPings reports whether p is one or more whole client frames each
// holding {"type":"ping"}, with any mask.
func onlyPings(p []byte) bool {
	const size = 2 + 4 + 15
	if len(p) == 0 || len(p)%size != 0 || len(maskedPing) != size {
		return false
	}
	for ; len(p) > 0; p = p[size:] {
		if p[0] != maskedPing[0] || p[1] != maskedPing[1] {
			return false
		}
		key := p[2:6]
		for i, b := range p[6:size] {
			if b^key[i&3] != pingText[i] {
				return false
			}
		}
	}
	return true
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

// closeSocket closes c's socket; its reader then finishes c.
func (c *conn) closeSocket() {
	if c.sse != nil {
		c.sse.hangUp()
		return
	}
	c.w.Close()
	if c.w.polled {
		c.wake()
	}
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

func (t *readTask) run() { (*conn)(t).serveReady() }
