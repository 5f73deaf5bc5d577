package transport

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// The writer: the side that writes a connection's socket, with its state
// (conn's queue, queued, welcomed, writing, held, closeMsg and closing),
// all under c.mu.
//
// Its rules, and where it meets the reader (reader.go):
//   - One owner of the write side at a time (writing): a writer task on a
//     worker, from when the queue becomes non-empty until it is empty
//     again, or the reader writing its own pongs (flushWrites). An idle
//     connection has neither.
//   - The queue is bounded in bytes by Hub.queueBytes: a client that falls
//     that far behind is closed as a slow consumer (enqueue says what
//     counts).
//   - Held: while the reader handles one read no writer starts
//     (holdWrites). At the flush, if the writer is idle and the queue holds
//     only pongs, the reader writes them itself in one write(2) that does
//     not wait; otherwise the writer starts.
//   - Owed: the bytes of those pongs the socket did not take are queued
//     first, as a rawFrame the writer writes whole even once c is closing;
//     the reader waits until it has (paid).
//   - Closing: markClosingLocked stops c taking frames and drops the queue
//     but a rawFrame; the close frame goes after the frame in flight
//     (closeWith, writeClose). Nothing follows a close frame, whoever wrote
//     it: the framer marks it as it goes out (framer.Write), the raw path
//     checks the mark (writeRaw), and a writer told the close was sent
//     (websocket.ErrCloseSent) drops the rest: whoever sent it finishes c.

// push counts and queues f, and reports false if the queue is full.
func (c *conn) push(f protocol.Encoded) bool {
	c.hub.m.sent(f.Type)
	if c.enqueue(f) {
		return true
	}
	c.hub.dropped(c.uid, f.Type)
	return false
}

func (c *conn) closeSlow() {
	c.closeWith(protocol.ClosePolicyViolation, protocol.ReasonSlowConsumer, reasonSlow)
}

// enqueue queues f (nil Data: a ping) for the writer. It reports false if
// the queue is full; the caller then closes c as a slow consumer. Frames for
// a closing connection are dropped.
//
// The bound measures a client that does not take what the writer sends, so
// frames queued while the reader holds an idle writer off (holdWrites) do
// not count against it: nothing may drain them yet. They count from the
// flush on, and what one read can queue is bounded by the inbound limits.
func (c *conn) enqueue(f protocol.Encoded) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return true
	}
	if (!c.held || c.writing) && int(c.queued)+len(f.Data) > c.hub.queueBytes {
		return false
	}
	if c.queue == nil {
		c.queue = queues.Get().(*[queueChunk]protocol.Encoded)[:0]
	}
	c.queue = append(c.queue, f)
	c.queued += int32(len(f.Data))
	c.startWriterLocked()
	return true
}

func (c *conn) startWriterLocked() {
	if c.welcomed && !c.writing && !c.held {
		c.writing = true
		c.runWriterLocked()
	}
}

// runWriterLocked starts the writer: a worker for a WebSocket, the
// request's own goroutine for a stream (sse.go). Called with writing just
// set.
func (c *conn) runWriterLocked() {
	if c.sse != nil {
		c.sse.wakeWriter()
		return
	}
	c.hub.workers.run((*writeTask)(c))
}

// sendWelcome puts the welcome first in the queue, ahead of broadcasts that
// arrived while it was being built, and lets the writer start.
func (c *conn) sendWelcome(f protocol.Encoded) {
	c.hub.m.sent(f.Type)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closing {
		c.queue = append([]protocol.Encoded{f}, c.queue...)
		c.queued += int32(len(f.Data))
	}
	c.welcomed = true
	c.startWriterLocked()
}

// holdWrites has the frames the reader's acts queue wait in the queue until
// flushWrites, instead of starting the writer for each: the answers to one
// read then go out together.
func (c *conn) holdWrites() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// flushWrites writes what the reader's acts queued since holdWrites. When
// the writer is idle and the queue holds only pongs, the reader writes them
// itself, in one write(2) that does not wait; what the socket does not take
// and any other frame go to the writer.
func (c *conn) flushWrites() {
	c.mu.Lock()
	c.held = false
	if c.writing || !c.welcomed || len(c.queue) == 0 || len(c.queue) > len(pongFrames)/len(pongWire) ||
		!allPongs(c.queue) {
		c.startWriterLocked()
		c.mu.Unlock()
		return
	}
	n := len(c.queue)
	putQueue(c.queue)
	c.queue, c.queued = nil, 0
	c.writing = true // the write side is the reader's until it is done
	c.mu.Unlock()

	out := pongFrames[:n*len(pongWire)]
	done, err := c.writeRaw(out, false)
	switch {
	case errors.Is(err, websocket.ErrCloseSent):
		// This read's close frame went out first: the pongs are dropped.
	case err != nil && err != syscall.EAGAIN:
		c.writeFailed(&net.OpError{Op: "write", Net: "tcp", Err: err})
	default:
		for range n {
			tap(false, pongAnswer.Data)
		}
	}
	c.mu.Lock()
	c.writing = false
	if (err == nil || err == syscall.EAGAIN) && done < len(out) {
		// The rest waits for the writer, which may wait for the socket,
		// ahead of whatever was queued meanwhile.
		rest := protocol.Encoded{Type: rawFrame, Data: out[done:]}
		c.queue = append([]protocol.Encoded{rest}, c.queue...)
		c.queued += int32(len(rest.Data))
		c.w.owed.Store(true)
	}
	c.startWriterLocked()
	c.mu.Unlock()
}

// allPongs reports whether every frame of q is pongAnswer.
func allPongs(q []protocol.Encoded) bool {
	for _, f := range q {
		if !isPongAnswer(f) {
			return false
		}
	}
	return true
}

// rawFrame marks queued bytes that are frames already, written as they
// are: the part of the reader's pongs the socket did not take. Begun
// frames must end: it is written even once c is closing, before the close
// frame.
const rawFrame = "\x00raw"

// paid is the writer's, once it wrote a rawFrame: the reader, which waits
// while the frames are owed, reads on. (A failed write closes the socket,
// and the reader reads on to the end anyway.)
func (c *conn) paid() {
	c.w.owed.Store(false)
	c.wake()
}

// writeRaw writes frames of c's own that do not pass through gorilla,
// encoded already: unless wait, only what the socket takes now
// (syscall.EAGAIN: nothing). Once c's close frame went out it writes
// nothing and returns websocket.ErrCloseSent, as gorilla does then. The
// check holds for the write after it: the side that writes (the reader
// in flushWrites, else the writer) is the only one that can write a close
// frame meanwhile, and a reader that owes the writer the rest of its pongs
// hands gorilla nothing (see pump).
func (c *conn) writeRaw(p []byte, wait bool) (int, error) {
	if c.closeSent() {
		return 0, websocket.ErrCloseSent
	}
	if !wait {
		return c.w.sock.writeOnce(p)
	}
	n, err := c.w.sock.write(p)
	if err != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Err: err}
	}
	return n, err
}

// closeSent reports whether c's close frame went out: its framer knows
// (framer.Write), and a connection that sent one keeps its framer.
func (c *conn) closeSent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fr != nil && c.fr.closeSent.Load()
}

// nextLocked takes what a writer writes next: the queued frames or, once
// they are all out, the close frame. With neither, the writer is done and
// writing ends. Called with c.mu held; the WebSocket's writer (writeLoop)
// and a stream's (writeEvents) both take their work here.
func (c *conn) nextLocked() (batch []protocol.Encoded, closeMsg *[]byte) {
	batch = c.queue
	c.queue, c.queued = nil, 0
	if len(batch) > 0 {
		return batch, nil
	}
	closeMsg, c.closeMsg = c.closeMsg, nil
	if closeMsg == nil {
		c.writing = false
	}
	return nil, closeMsg
}

func (c *conn) writeLoop() {
	wt := c.hub.writeTimeout
	var ws *websocket.Conn
	for {
		c.mu.Lock()
		if ws == nil {
			ws = c.lendLocked() // given back when the loop ends
		}
		batch, closeMsg := c.nextLocked()
		if len(batch) == 0 {
			if closeMsg == nil {
				c.giveBackLocked()
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			c.writeClose(ws, *closeMsg)
			continue // closing: nothing more is queued, the loop ends
		}
		c.mu.Unlock()
		for _, f := range batch {
			if c.stopped.Load() && f.Type != rawFrame {
				break
			}
			var err error
			switch {
			case f.Type == rawFrame:
				c.w.SetWriteDeadline(time.Now().Add(wt))
				if _, err = c.writeRaw(f.Data, true); err == nil || errors.Is(err, websocket.ErrCloseSent) {
					c.paid() // a failed write closes the socket: the reader then reads on anyway
				}
			case f.Type == pongFrame:
				err = ws.WriteControl(websocket.PongMessage, f.Data, time.Now().Add(wt))
			case f.Data == nil:
				err = ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(wt))
			case isPongAnswer(f):
				ws.SetWriteDeadline(time.Now().Add(wt))
				tap(false, f.Data)
				err = ws.WritePreparedMessage(pongPrepared)
			default:
				ws.SetWriteDeadline(time.Now().Add(wt))
				tap(false, f.Data)
				err = ws.WriteMessage(websocket.TextMessage, f.Data)
			}
			if err != nil {
				// After a close frame, whoever sent it finishes c: what
				// is left is dropped, and the socket stays open for the
				// client's answer (or a drain after 1009).
				if !errors.Is(err, websocket.ErrCloseSent) {
					c.writeFailed(err)
				}
				break
			}
		}
		putQueue(batch)
	}
}

// putQueue gives q's array back to its pool, cleared, if it came from there.
func putQueue(q []protocol.Encoded) {
	if cap(q) == queueChunk {
		clear(q[:queueChunk])
		queues.Put((*[queueChunk]protocol.Encoded)(q[:queueChunk]))
	}
}

// queues are the arrays a connection queues its first frames in, pooled
// while the queue is empty: an idle connection keeps none, and a busy one
// does not allocate one per answer. A queue that outgrows one is left to
// the collector.
var queues = sync.Pool{New: func() any { return new([queueChunk]protocol.Encoded) }}

const queueChunk = 4

// markClosingLocked stops c from taking frames and drops its queue. The
// first call counts reason in presenced_closes_total, before a close frame
// or a dropped socket can reach the client, and reports true.
func (c *conn) markClosingLocked(reason string) bool {
	if c.closing {
		return false
	}
	c.closing = true
	c.stopped.Store(true)
	if len(c.queue) > 0 && c.queue[0].Type == rawFrame {
		c.queue, c.queued = c.queue[:1], int32(len(c.queue[0].Data))
	} else {
		c.queue, c.queued = nil, 0
	}
	c.hub.m.closes.WithLabelValues(reason).Inc()
	return true
}

// closeWith starts closing c with a close frame, sent by the writer after the
// frame in flight; queued data is dropped. c stops counting for presence
// once the frames it sent before are handled: at once if none waits.
// Idempotent.
func (c *conn) closeWith(code int, reason, metric string) {
	c.mu.Lock()
	if !c.markClosingLocked(metric) {
		c.mu.Unlock()
		return
	}
	msg := websocket.FormatCloseMessage(code, reason)
	c.closeMsg = &msg
	c.welcomed = true // a close needs no welcome before it
	if !c.writing {
		c.writing = true
		c.runWriterLocked()
	}
	c.mu.Unlock()
	c.end(leaving)
}

// writeFailed drops the socket of a client that could not take one frame
// within the deadline (too slow) or is gone; the reader finishes the rest.
func (c *conn) writeFailed(err error) {
	c.hub.log.Debug("transport: write failed", "uid", c.uid, "err", err)
	reason := reasonClient
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		reason = reasonSlow
	}
	c.mu.Lock()
	c.markClosingLocked(reason)
	c.closeMsg = nil
	c.mu.Unlock()
	c.closeSocket()
}

// writeClose sends a close frame and bounds how long the reader waits for
// the client's answer before the socket is dropped.
func (c *conn) writeClose(ws *websocket.Conn, msg []byte) {
	c.setReadDeadline(time.Now().Add(c.hub.closeTimeout))
	err := ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.hub.writeTimeout))
	if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
		c.closeSocket()
	}
}

// pongAnswer is the answer to every ping, encoded once: its bytes are only
// read. The writer sends it as pongPrepared, framed once too: gorilla's
// WriteMessage allocates a writer for every message.
var (
	pongAnswer   = protocol.MustEncode(protocol.Pong{})
	pongPrepared = mustPrepare(pongAnswer.Data)
)

func mustPrepare(text []byte) *websocket.PreparedMessage {
	pm, err := websocket.NewPreparedMessage(websocket.TextMessage, text)
	if err != nil {
		panic(fmt.Sprintf("transport: preparing %s: %v", text, err))
	}
	return pm
}

// isPongAnswer reports whether f is pongAnswer itself, not a frame that
// happens to have its type.
func isPongAnswer(f protocol.Encoded) bool {
	return len(f.Data) > 0 && &f.Data[0] == &pongAnswer.Data[0]
}

// pongWire is pongAnswer as a server's text frame; pongFrames is as many
// as one read's answers are written from at once, back to back.
var (
	pongWire   = append([]byte{0x81, byte(len(pongAnswer.Data))}, pongAnswer.Data...)
	pongFrames = bytes.Repeat(pongWire, 16)
)

// pong answers a ping, queued behind the frames that answer what the client
// sent before it, so a pong says those answers are on their way first.
func (c *conn) pong(data string) {
	if !c.enqueue(protocol.Encoded{Type: pongFrame, Data: []byte(data)}) {
		c.closeSlow()
	}
}

// pongFrame marks a queued WebSocket pong: no text frame has this type.
const pongFrame = "\x00pong"

func (t *writeTask) run() { (*conn)(t).writeLoop() }

// Send queues a frame from the presence node. A connection whose queue is
// full is closed as a slow consumer, on a goroutine of its own: the node
// calls Send under its locks.
func (c *conn) Send(f protocol.Encoded) {
	if !c.push(f) {
		go c.closeSlow()
	}
}
