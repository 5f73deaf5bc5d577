package transport

import (
	"bufio"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// framer is a gorilla Conn lent to a connection while gorilla reads or
// writes its frames. gorilla's Conn and its read buffer are a large part of
// an idle connection (docs/floor.md, third pass), and an idle polled
// connection needs neither: its pings are read and answered without gorilla
// (reader.go).
// So a polled connection holds a framer only while its reader, its writer or
// its handshake uses one, and gives it back to the Hub's spares when the
// last of them is done. A connection that is not polled keeps its framer for
// life: its reader is parked in gorilla.
//
// A framer passes from one connection to another only between messages: a
// polled reader hands gorilla whole messages (wire.go), so gorilla's read
// buffer is empty and its reader at a message's start whenever the reader
// is done, and its writer writes whole messages. A connection that closes
// keeps its framer (gorilla's errors stick to its Conn), and it goes with
// the connection.
//
// The framer is the net.Conn gorilla reads and writes through: it passes
// every call to the wire of the connection it is lent to.
type framer struct {
	ws *websocket.Conn
	c  *conn // the connection it is lent to; nil while spare or being made
	// users counts the connection's reader, writer and handshake using it,
	// under c.mu.
	users int32
	// outRest is how much of the frame gorilla is writing is still to
	// come: 0 between frames, so whenever the framer changes hands.
	outRest int32
	// closeSent: a close frame went out through ws, or is going (see
	// Write). A connection that sends one keeps its framer.
	closeSent atomic.Bool
}

// lendLocked gives c a framer, its own, a spare or a new one, for one more
// user, and returns its gorilla Conn. It is c's until giveBackLocked. The
// caller holds c.mu.
func (c *conn) lendLocked() *websocket.Conn {
	if c.fr == nil {
		f := c.hub.spareFramer()
		f.c = c
		c.fr = f
	}
	c.fr.users++
	return c.fr.ws
}

// lend is lendLocked for a caller that does not hold c.mu.
func (c *conn) lend() *websocket.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lendLocked()
}

// giveBackLocked ends one use of c's framer; the last use of a polled,
// open connection gives it back to the Hub's spares. The caller holds c.mu.
func (c *conn) giveBackLocked() {
	f := c.fr
	if f.users--; f.users > 0 || !c.w.polled || c.closing {
		return
	}
	c.fr, f.c = nil, nil
	select {
	case c.hub.framers <- f:
	default: // enough spares: the collector takes it
	}
}

func (c *conn) giveBack() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.giveBackLocked()
}

// setUp gives a new framer the Hub's read limit and handlers: they are the
// same for every connection, and follow the framer to each.
func (h *Hub) setUp(f *framer) {
	// A watch frame may pass MaxMessage: readMessage decides.
	f.ws.SetReadLimit(h.readLimit())
	f.ws.SetPingHandler(func(data string) error { return f.c.pingHandler(data) })
	f.ws.SetPongHandler(func(data string) error { return f.c.pongHandler(data) })
}

// spareFramers is how many framers the Hub keeps spare for each worker it
// can run: a framer is lent to a connection while a worker reads or writes
// it (and while a handshake runs), so twice the workers is rarely short.
// They are kept across collections, which would empty a sync.Pool: a framer
// made afresh costs a blank handshake and its garbage.
const spareFramers = 2

// spareFramer returns one of the Hub's spare framers, or a new one.
func (h *Hub) spareFramer() *framer {
	select {
	case f := <-h.framers:
		return f
	default:
		return h.newFramer()
	}
}

// dropSpareFramers leaves h's spare framers to the collector.
func (h *Hub) dropSpareFramers() {
	for {
		select {
		case <-h.framers:
		default:
			return
		}
	}
}

// newFramer makes a framer. gorilla makes a server's Conn only in a
// handshake, so it is given one with no client: the answer it writes goes
// nowhere (framer.Write with no connection).
func (h *Hub) newFramer() *framer {
	f := &framer{}
	ws, err := h.blankUpgrader.Upgrade(blankResponse{f}, blankRequest, nil)
	if err != nil {
		// The request is ours and always valid: only a gorilla that
		// changed its handshake gets here.
		panic("transport: making a gorilla Conn: " + err.Error())
	}
	f.ws = ws
	h.setUp(f)
	return f
}

// blankRequest is a valid WebSocket handshake, the one a framer is made
// with; gorilla only reads it.
var blankRequest = &http.Request{
	Method: http.MethodGet,
	Header: http.Header{
		"Connection":            {"Upgrade"},
		"Upgrade":               {"websocket"},
		"Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key":     {"AAAAAAAAAAAAAAAAAAAAAA=="},
	},
}

// blankResponse is the response a framer is made with: its Hijack hands
// gorilla the framer, with buffers that hold nothing.
type blankResponse struct{ f *framer }

func (b blankResponse) Header() http.Header         { return http.Header{} }
func (b blankResponse) Write(p []byte) (int, error) { return len(p), nil }
func (b blankResponse) WriteHeader(int)             {}

func (b blankResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return b.f, bufio.NewReadWriter(bufio.NewReaderSize(strings.NewReader(""), 16), bufio.NewWriterSize(io.Discard, 16)), nil
}

// hijacker hands gorilla the socket of the connection being upgraded
// through its framer.
type hijacker struct {
	http.ResponseWriter
	f *framer
}

func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.f.c.w.Conn = nc
	return h.f, brw, nil
}

func (f *framer) Read(p []byte) (int, error) {
	if f.c == nil {
		return 0, io.EOF
	}
	return f.c.w.Read(p)
}

// Write is every write gorilla makes, so it is the one place that sees
// each close frame go out, whoever asked for it: the writer, a 1009 of
// ours, or gorilla itself from inside its reader (a close echoed, a 1002
// for a frame it refuses, a 1009 at its read limit). closeSent is set
// before the frame is written; the frames of ours that do not pass through
// gorilla check it (conn.writeRaw), so none follows a close frame.
func (f *framer) Write(p []byte) (int, error) {
	if f.c == nil {
		return len(p), nil // a blank handshake's answer
	}
	if f.ws != nil { // else the handshake's answer, which is no frame
		f.follow(p)
	}
	return f.c.w.Write(p)
}

// follow notes the frames in p, gorilla's next write. gorilla writes a
// frame with its header whole at the start of a call, and the rest of a
// long one in the call after (net.Buffers); outRest tells the rest from a
// header.
func (f *framer) follow(p []byte) {
	for len(p) > 0 {
		if f.outRest == 0 {
			h, ok := parseHeader(p)
			if !ok {
				return // not a frame as gorilla writes one: nothing to follow
			}
			if h.opcode == opClose {
				f.closeSent.Store(true)
			}
			f.outRest = int32(min(int64(h.headerLen)+h.payload, math.MaxInt32))
		}
		n := min(len(p), int(f.outRest))
		f.outRest -= int32(n)
		p = p[n:]
	}
}

func (f *framer) Close() error {
	if f.c == nil {
		return nil
	}
	return f.c.w.Close()
}

func (f *framer) LocalAddr() net.Addr {
	if f.c == nil {
		return nil
	}
	return f.c.w.LocalAddr()
}

func (f *framer) RemoteAddr() net.Addr {
	if f.c == nil {
		return nil
	}
	return f.c.w.RemoteAddr()
}

func (f *framer) SetDeadline(t time.Time) error {
	if f.c == nil {
		return nil
	}
	return f.c.w.SetDeadline(t)
}

func (f *framer) SetReadDeadline(t time.Time) error {
	if f.c == nil {
		return nil
	}
	return f.c.w.SetReadDeadline(t)
}

func (f *framer) SetWriteDeadline(t time.Time) error {
	if f.c == nil {
		return nil
	}
	return f.c.w.SetWriteDeadline(t)
}

var _ net.Conn = (*framer)(nil)
