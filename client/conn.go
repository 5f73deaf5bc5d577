package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// conn is one WebSocket of a Client, with its reader and writer
// goroutines.
type conn struct {
	c       *Client
	gen     uint64
	ws      *websocket.Conn
	uid     string
	timeout time.Duration // the server's, from the welcome

	out        chan outMsg
	done       chan struct{} // closed when the connection ended
	writerDone chan struct{}
	readerDone chan struct{}
	endOnce    sync.Once
	err        error       // why it ended; set before done is closed
	silenced   atomic.Bool // no app pings (tests)

	pending []*request // answers awaited, in the order asked; c.mu guards it
	ended   bool       // c.mu guards it
	pings   uint64     // app pings written so far; c.mu guards it
	pongs   uint64     // pongs read so far; c.mu guards it
}

type outMsg struct {
	data []byte
	errc chan error // the write's result; capacity 1
	set  *request   // a set frame's request: the frame goes between two pings
}

// request is a frame whose answer a call awaits: an answer of type kind
// about channel, or an error frame about channel.
type request struct {
	kind    string // the answer's type: joined, left, watching, members, set
	channel string
	after   string       // members: the page's start
	limit   int          // members: the most the page may hold
	uids    []string     // watching: the list asked for
	ping    uint64       // set: the number of the ping written just before it; 0 until written
	change  protocol.Set // set: the change, for the Client's own record
	res     chan result
}

type result struct {
	frame protocol.Frame
	err   error
}

// start makes a conn of ws and starts its reader and writer.
func (c *Client) start(ws *websocket.Conn, w *protocol.Welcome) *conn {
	c.mu.Lock()
	c.gen++
	gen := c.gen
	c.mu.Unlock()
	cn := &conn{
		c: c, gen: gen, ws: ws, uid: w.UID,
		timeout:    serverTimeout(w.TimeoutMS),
		out:        make(chan outMsg),
		done:       make(chan struct{}),
		writerDone: make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	ws.SetPingHandler(func(data string) error {
		_ = ws.SetReadDeadline(time.Now().Add(cn.readTimeout()))
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeTimeout))
		if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
			cn.end(fmt.Errorf("client: answer ping: %w", err))
		}
		return nil
	})
	c.mu.Lock()
	c.welcomedLocked(w)
	c.emitLocked(w)
	c.mu.Unlock()
	go cn.read()
	go cn.write()
	return cn
}

// readTimeout is how long the connection may bring nothing before the
// Client drops it: the server pings after half its timeout of silence and
// answers the app pings, so a live connection brings something well within
// it.
func (cn *conn) readTimeout() time.Duration { return max(2*cn.timeout, minReadTimeout) }

// end ends the connection with err, once: it fails the calls awaiting
// answers on it and stops calls from using it.
func (cn *conn) end(err error) {
	cn.endOnce.Do(func() {
		c := cn.c
		c.mu.Lock()
		cn.err, cn.ended = err, true
		for _, r := range cn.pending {
			r.res <- result{err: errConnLost}
		}
		cn.pending = nil
		if c.live == cn {
			c.live = nil
			c.broadcastLocked()
		}
		c.mu.Unlock()
		close(cn.done)
		cn.ws.Close()
	})
}

// shutdown closes the connection with a normal close frame, waiting a
// moment for the server's answer.
func (cn *conn) shutdown() {
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "client closed")
	if err := cn.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second)); err == nil {
		select {
		case <-cn.readerDone:
		case <-time.After(time.Second):
		}
	}
	cn.end(ErrClosed)
}

// fail ends the connection of a server that broke the protocol, telling
// it so (1002) on the way.
func (cn *conn) fail(err error) {
	cn.c.log.Warn("client: connection dropped", "err", err)
	msg := websocket.FormatCloseMessage(websocket.CloseProtocolError, "protocol error")
	_ = cn.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	cn.end(err)
}

// wait waits for the reader and writer to return, after end.
func (cn *conn) wait() {
	<-cn.readerDone
	<-cn.writerDone
}

// read is the connection's one reader: it applies every frame to the
// Client's state, in order, and passes it on to Events. Before it reads
// the next frame it hands over the data events Events had no room for,
// waiting for the application (deliver). The read deadline is set only
// when it reads again: time spent waiting for the application is not
// silence of the server's.
func (cn *conn) read() {
	defer close(cn.readerDone)
	for {
		_ = cn.ws.SetReadDeadline(time.Now().Add(cn.readTimeout()))
		typ, data, err := cn.ws.ReadMessage()
		if err != nil {
			cn.end(err)
			return
		}
		if typ == websocket.TextMessage {
			if f, err := protocol.ParseServer(data); err != nil {
				cn.c.log.Debug("client: frame not understood", "err", err)
			} else if err := cn.c.handle(cn, f); err != nil {
				cn.fail(err)
				return
			}
		}
		cn.deliver()
	}
}

var pingFrame = protocol.MustEncode(protocol.Ping{}).Data

// write is the connection's one writer: the calls' frames, and an app ping
// every third of the timeout.
func (cn *conn) write() {
	defer close(cn.writerDone)
	ping := time.NewTicker(cn.timeout / 3)
	defer ping.Stop()
	for {
		var m outMsg
		select {
		case <-cn.done:
			return
		case m = <-cn.out:
		case <-ping.C:
			if cn.silenced.Load() {
				continue
			}
			m.data = pingFrame
		}
		var err error
		if m.set != nil {
			err = cn.writeSet(m.set, m.data)
		} else {
			err = cn.writeFrame(m.data)
		}
		if m.errc != nil {
			m.errc <- err
		}
		if err != nil {
			cn.end(fmt.Errorf("client: write: %w", err))
			return
		}
	}
}

// writeFrame writes one frame, counting the pings: the server answers
// every ping with a pong, in order, so the count of pongs read tells which
// frames the server has handled.
func (cn *conn) writeFrame(data []byte) error {
	if bytes.Equal(data, pingFrame) {
		cn.c.mu.Lock()
		cn.pings++
		cn.c.mu.Unlock()
	}
	_ = cn.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
	return cn.ws.WriteMessage(websocket.TextMessage, data)
}

// writeSet writes a set frame between two pings, back to back. The server
// answers a set with nothing when it takes it, and handles frames in the
// order they came, so an error frame between the two pongs is the set's
// refusal, and the second pong without one is its success (handle.go).
func (cn *conn) writeSet(r *request, data []byte) error {
	cn.c.mu.Lock()
	r.ping = cn.pings + 1
	cn.c.mu.Unlock()
	for _, frame := range [][]byte{pingFrame, data, pingFrame} {
		if err := cn.writeFrame(frame); err != nil {
			return err
		}
	}
	return nil
}

// send hands f to the writer and waits for the write.
func (cn *conn) send(ctx context.Context, f protocol.Frame) error {
	e, err := protocol.Encode(f)
	if err != nil {
		return err
	}
	return cn.sendRaw(ctx, e.Data)
}

func (cn *conn) sendRaw(ctx context.Context, data []byte) error {
	return cn.sendMsg(ctx, outMsg{data: data})
}

func (cn *conn) sendMsg(ctx context.Context, m outMsg) error {
	m.errc = make(chan error, 1)
	select {
	case cn.out <- m:
	case <-cn.done:
		return errConnLost
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := <-m.errc; err != nil {
		return fmt.Errorf("%w: %w", errConnLost, err)
	}
	return nil
}

// ask sends f and registers r for its answer, which await then waits for.
func (cn *conn) ask(ctx context.Context, f protocol.Frame, r *request) error {
	e, err := protocol.Encode(f)
	if err != nil {
		return err
	}
	return cn.askRaw(ctx, e.Data, r)
}

// askRaw is ask for a frame encoded already; a set goes between pings.
func (cn *conn) askRaw(ctx context.Context, data []byte, r *request) error {
	c := cn.c
	r.res = make(chan result, 1)
	c.mu.Lock()
	if cn.ended {
		c.mu.Unlock()
		return errConnLost
	}
	cn.pending = append(cn.pending, r)
	c.mu.Unlock()
	m := outMsg{data: data}
	if r.kind == "set" {
		m.set = r
	}
	err := cn.sendMsg(ctx, m)
	if err != nil && !errors.Is(err, errConnLost) {
		// Not sent: no answer will come.
		c.mu.Lock()
		cn.dropLocked(r)
		c.mu.Unlock()
	}
	return err
}

// dropLocked removes r from the requests awaiting an answer.
func (cn *conn) dropLocked(r *request) {
	for i, p := range cn.pending {
		if p == r {
			cn.pending = append(cn.pending[:i], cn.pending[i+1:]...)
			return
		}
	}
}

// await waits for r's answer. A request given up on stays in the queue, so
// that its answer, when it comes, is not taken for a later one's.
func (cn *conn) await(ctx context.Context, r *request) (protocol.Frame, error) {
	select {
	case res := <-r.res:
		return res.frame, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// call is ask then await.
func (cn *conn) call(ctx context.Context, f protocol.Frame, r *request) (protocol.Frame, error) {
	if err := cn.ask(ctx, f, r); err != nil {
		return nil, err
	}
	return cn.await(ctx, r)
}

// callRaw is askRaw then await.
func (cn *conn) callRaw(ctx context.Context, data []byte, r *request) (protocol.Frame, error) {
	if err := cn.askRaw(ctx, data, r); err != nil {
		return nil, err
	}
	return cn.await(ctx, r)
}

// takeLocked removes and returns the first request awaiting an answer of
// type kind about channel, or nil.
func (cn *conn) takeLocked(kind, channel string) *request {
	for i, r := range cn.pending {
		if r.kind == kind && r.channel == channel {
			cn.pending = append(cn.pending[:i], cn.pending[i+1:]...)
			return r
		}
	}
	return nil
}

// takeErrorLocked removes and returns the request an error frame about
// channel answers: the first about that channel, or for an error naming
// no channel the first watch.
func (cn *conn) takeErrorLocked(channel string) *request {
	for i, r := range cn.pending {
		if r.channel == channel && (channel != "" || r.kind == "watching") {
			cn.pending = append(cn.pending[:i], cn.pending[i+1:]...)
			return r
		}
	}
	return nil
}
