package transport

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// wire is the socket as gorilla reads and writes it, through the framer
// lent to the connection (framer.go): reads come, when the connection is
// polled, from what c's worker read off the socket and handed over instead
// of from the socket itself, and writes go to the descriptor the
// connection took over (socket).
//
// A polled connection holds no goroutine while it is idle. When the poller
// reports its socket readable, a worker reads everything the socket has
// without blocking, and hands gorilla one unit at a time: a whole message
// (with the control frames before and inside it), or the control frames
// that arrived on their own. gorilla parses and checks every frame and
// answers pings and close frames as it always does; the worker only finds
// where frames end. gorilla's NextReader returns only with a data message,
// so control frames on their own are followed by an empty text frame of
// ours, which the worker reads and drops (synthetic). gorilla must read
// through wire with a buffer of its own: Upgrader.ReadBufferSize stays
// non-zero (see newHub).
type wire struct {
	net.Conn               // the socket until it is polled, then nil
	sock     socket        // the socket once polled
	in       *inbound      // while a worker reads, or part of a frame waits; else nil
	deadline atomic.Int64  // UnixNano after which an idle read fails; 0: none
	state    atomic.Uint32 // idle, running or again: at most one worker
	hup      atomic.Bool   // the peer hung up or the socket failed: read to the end
	owed     atomic.Bool   // the writer owes the client the rest of frames the reader began (see pump)
	polled   bool          // reads come from what the worker read
	finished bool          // the worker has finished the connection
	draining bool          // after a 1009: the worker drops what comes until the peer hangs up
	filled   bool          // pending holds what the quick path read and left to the worker
}

// inbound is what a polled connection's worker reads with: pooled, so an
// idle connection keeps none.
type inbound struct {
	pending []byte // read off the socket, not yet handed to gorilla
	fed     []byte // handed to gorilla, not yet read by it
	rerr    error  // what a read returns once fed is empty: the socket's error, or errStarved

	unitLen   int  // bytes of pending the unit fed takes
	synthetic bool // the unit fed ends with our empty text frame
}

var inbounds = sync.Pool{New: func() any { return new(inbound) }}

// Worker states: a wake while a worker runs makes it look again before it
// exits, so no readiness is missed and no two workers read one socket.
const (
	idle uint32 = iota
	running
	again
)

// errStarved is what gorilla gets if it asks for more than the unit it was
// fed, or leaves part of it unread: a bug in unit. The connection is then
// closed, never stalled.
var errStarved = errors.New("transport: gorilla and the frame scanner disagree on where frames end")

// errAgain: the socket has nothing more to read now.
var errAgain = errors.New("transport: socket drained")

// errTooBig: pending holds more than any message within the limit needs
// without completing one (a stream of empty fragments, say).
var errTooBig = errors.New("transport: message too big")

// Read is gorilla's read: from the socket, or from the unit fed.
func (w *wire) Read(p []byte) (int, error) {
	if !w.polled {
		return w.Conn.Read(p)
	}
	in := w.in
	if in == nil || len(in.fed) == 0 {
		if in != nil && in.rerr != nil {
			return 0, in.rerr
		}
		return 0, errStarved
	}
	n := copy(p, in.fed)
	in.fed = in.fed[n:]
	return n, nil
}

// Write is gorilla's write; gorilla has one writer at a time.
func (w *wire) Write(p []byte) (int, error) {
	if w.Conn != nil {
		return w.Conn.Write(p)
	}
	n, err := w.sock.write(p)
	if err != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Err: err}
	}
	return n, err
}

// Close closes the socket: a polled one once no read or write uses it.
func (w *wire) Close() error {
	if w.Conn != nil {
		return w.Conn.Close()
	}
	if !w.sock.close() {
		return net.ErrClosed
	}
	return nil
}

func (w *wire) LocalAddr() net.Addr {
	if w.Conn != nil {
		return w.Conn.LocalAddr()
	}
	return w.sock.localAddr()
}

func (w *wire) RemoteAddr() net.Addr {
	if w.Conn != nil {
		return w.Conn.RemoteAddr()
	}
	return w.sock.remoteAddr()
}

func (w *wire) SetDeadline(t time.Time) error {
	w.SetReadDeadline(t)
	return w.SetWriteDeadline(t)
}

// SetReadDeadline is gorilla's; a polled connection's reader sets its
// deadline with conn.setReadDeadline, which also wakes it then.
func (w *wire) SetReadDeadline(t time.Time) error {
	if !w.polled {
		return w.Conn.SetReadDeadline(t)
	}
	w.deadline.Store(unixNano(t))
	return nil
}

func (w *wire) SetWriteDeadline(t time.Time) error {
	if w.Conn != nil {
		return w.Conn.SetWriteDeadline(t)
	}
	w.sock.setWriteDeadline(t)
	return nil
}

// unixNano is t as a deadline: 0 for none.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// synthetic reports whether the message gorilla is reading is ours.
func (w *wire) synthetic() bool { return w.in != nil && w.in.synthetic }

// readChunk is the buffer a worker reads the socket into: it holds the
// largest message of the default MaxMessage with its frame headers. Larger
// messages grow it.
const readChunk = 4096 + 256

var chunks = sync.Pool{New: func() any { b := make([]byte, 0, readChunk); return &b }}

// fill reads once from the socket, without blocking, onto pending, which
// may grow to max bytes; drained reports a read that left room, so took all
// the socket had. It returns errAgain when there was nothing to read, io.EOF
// when the peer closed, and the socket's error when it failed.
func (w *wire) fill(max int) (drained bool, err error) {
	if w.in == nil {
		w.in = inbounds.Get().(*inbound)
	}
	in := w.in
	if in.pending == nil {
		in.pending = (*chunks.Get().(*[]byte))[:0]
	}
	if len(in.pending) == cap(in.pending) {
		if len(in.pending) >= max {
			return false, errTooBig
		}
		grown := make([]byte, len(in.pending), min(max, 2*cap(in.pending)))
		copy(grown, in.pending)
		putChunk(in.pending)
		in.pending = grown
	}
	room := cap(in.pending) - len(in.pending)
	n, rerr := w.sock.read(in.pending[len(in.pending):cap(in.pending)])
	switch {
	case rerr == net.ErrClosed:
		return false, rerr // closed by us
	case rerr == syscall.EAGAIN:
		return false, errAgain
	case rerr != nil:
		return false, &net.OpError{Op: "read", Net: "tcp", Err: rerr}
	case n == 0:
		return false, io.EOF
	}
	in.pending = in.pending[:len(in.pending)+n]
	return n < room, nil
}

// release gives the read buffers back to their pools when they hold
// nothing, or keeps only what they hold: an idle connection keeps no read
// buffer, unless part of a frame waits for the rest.
func (w *wire) release() {
	in := w.in
	if in == nil {
		return
	}
	in.fed, in.rerr, in.unitLen, in.synthetic = nil, nil, 0, false
	switch {
	case len(in.pending) == 0:
		// A chunk stays with its inbound in the pool: a slice put in a
		// pool of its own costs an allocation each time.
		if cap(in.pending) != readChunk {
			in.pending = nil
		}
		w.in = nil
		inbounds.Put(in)
	case cap(in.pending) == readChunk:
		rest := make([]byte, len(in.pending))
		copy(rest, in.pending)
		putChunk(in.pending)
		in.pending = rest
	}
}

// discard drops whatever was read and not acted on: the connection is done.
func (w *wire) discard() {
	if w.in != nil {
		w.in.pending = w.in.pending[:0]
		w.release()
	}
}

// putChunk gives b back to the pool if it came from there.
func putChunk(b []byte) {
	if cap(b) == readChunk {
		b = b[:0]
		chunks.Put(&b)
	}
}

// next hands gorilla the next unit of pending and reports whether there is
// one; drop removes it from pending once gorilla has read it. A unit is what
// gorilla can read to the end without waiting for more: a whole message, the
// control frames that arrived on their own, or everything up to a frame
// header gorilla will refuse (a bad frame, or a message over limit), at
// which it stops with its own error and close code.
func (in *inbound) next(limit int64) bool {
	end, controls := unit(in.pending, limit)
	switch {
	case end > 0:
		in.fed = in.pending[:end]
		in.unitLen, in.synthetic = end, false
		return true
	case len(controls) == 0:
		return false
	}
	fed := make([]byte, 0, 64)
	kept := in.pending[:0]
	last := 0
	for _, s := range controls {
		fed = append(fed, in.pending[s[0]:s[1]]...)
		kept = append(kept, in.pending[last:s[0]]...)
		last = s[1]
	}
	kept = append(kept, in.pending[last:]...)
	in.pending = kept
	in.fed = append(fed, emptyTextFrame...)
	in.unitLen, in.synthetic = 0, true // the control frames are out of pending already
	return true
}

// drop removes from pending the unit gorilla has just read, and fails if
// gorilla left part of it unread.
func (in *inbound) drop() error {
	if len(in.fed) != 0 {
		return errStarved
	}
	in.fed = nil
	in.pending = in.pending[:copy(in.pending, in.pending[in.unitLen:])]
	in.unitLen, in.synthetic = 0, false
	return nil
}

// emptyTextFrame is a masked text frame with no payload: it ends a unit of
// control frames so that gorilla's NextReader returns.
var emptyTextFrame = []byte{0x81, 0x80, 0, 0, 0, 0}

// WebSocket opcodes (RFC 6455, 5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// unit finds the first unit in p (see next): a prefix of p, p[:end], or, if
// no message is complete yet, the control frames among the complete frames
// (their spans), which may come before or between a message's fragments.
// It parses only what it needs to find frame ends; gorilla checks frames.
func unit(p []byte, limit int64) (end int, controls [][2]int) {
	pos := 0
	inMessage := false
	var size int64
	for {
		h, ok := parseHeader(p[pos:])
		if !ok {
			return 0, controls
		}
		if !h.acceptable(inMessage) {
			return pos + h.headerLen, nil
		}
		if !h.control() {
			size += h.payload
			if size > limit || size < 0 {
				return pos + h.headerLen, nil
			}
		}
		if int64(len(p)-pos-h.headerLen) < h.payload {
			return 0, controls
		}
		next := pos + h.headerLen + int(h.payload)
		if h.control() {
			controls = append(controls, [2]int{pos, next})
		} else {
			inMessage = !h.fin
			if h.fin {
				return next, nil
			}
		}
		pos = next
	}
}

// header is what unit needs of a frame header.
type header struct {
	fin       bool
	rsv       byte
	opcode    byte
	masked    bool
	len7      byte  // the 7-bit length field
	payload   int64 // negative if the 64-bit length overflows
	headerLen int
}

// parseHeader parses the frame header at the start of p; ok is false if p
// holds only part of it.
func parseHeader(p []byte) (h header, ok bool) {
	if len(p) < 2 {
		return h, false
	}
	h.fin = p[0]&0x80 != 0
	h.rsv = p[0] & 0x70
	h.opcode = p[0] & 0x0f
	h.masked = p[1]&0x80 != 0
	h.len7 = p[1] & 0x7f
	h.headerLen = 2
	switch h.len7 {
	case 126:
		h.headerLen += 2
	case 127:
		h.headerLen += 8
	}
	if h.masked {
		h.headerLen += 4
	}
	if len(p) < h.headerLen {
		return h, false
	}
	switch h.len7 {
	case 126:
		h.payload = int64(binary.BigEndian.Uint16(p[2:]))
	case 127:
		h.payload = int64(binary.BigEndian.Uint64(p[2:]))
	default:
		h.payload = int64(h.len7)
	}
	return h, true
}

func (h header) control() bool { return h.opcode >= opClose }

// acceptable reports whether gorilla, as a server without compression, will
// read on past this header: anything it refuses must be handed over at
// once, or the connection would wait for bytes gorilla never asks for.
// A frame with an RSV bit is one it refuses (1002), so the Upgrader must
// not negotiate permessage-deflate: its frames set RSV1, and their
// payload's length says nothing of the message's.
func (h header) acceptable(inMessage bool) bool {
	if h.rsv != 0 || !h.masked {
		return false
	}
	switch h.opcode {
	case opClose, opPing, opPong:
		return h.fin && h.len7 <= 125
	case opText, opBinary:
		return !inMessage
	case opContinuation:
		return inMessage
	}
	return false
}
