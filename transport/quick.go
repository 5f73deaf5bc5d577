package transport

import (
	"bytes"
	"errors"
	"net"
	"syscall"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// The quick path: what a polled socket has when it wakes is, almost always,
// one {"type":"ping"} and nothing else. The worker reads it and answers it
// without gorilla's reader (which allocates one per message) and, when the
// writer is idle, without the writer: the pong goes out from pre-encoded
// bytes in the same turn. Anything else it read (another frame, part of
// one, more than a read holds, a hang-up) goes the usual way (pump), with
// the bytes read so far first.
//
// The poller's goroutine does not take the quick path itself: measured at
// 15,000 connections, that cost more CPU than the hand-off it saved, and
// silent clients were found late in three runs of five.

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

// pongWire is pongAnswer as a server's text frame; pongFrames is as many
// as one read's answers are written from at once, back to back.
var (
	pongWire   = append([]byte{0x81, byte(len(pongAnswer.Data))}, pongAnswer.Data...)
	pongFrames = bytes.Repeat(pongWire, 16)
)
