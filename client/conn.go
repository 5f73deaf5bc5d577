package client

import (
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
}

type outMsg struct {
	data []byte
	errc chan error // the write's result; capacity 1
}

// request is a frame whose answer a call awaits: an answer of type kind
// about channel, or an error frame about channel.
type request struct {
	kind    string // the answer's type: joined, left, watching, members
	channel string
	after   string   // members: the page's start
	limit   int      // members: the most the page may hold
	uids    []string // watching: the list asked for
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
		var data []byte
		var errc chan error
		select {
		case <-cn.done:
			return
		case m := <-cn.out:
			data, errc = m.data, m.errc
		case <-ping.C:
			if cn.silenced.Load() {
				continue
			}
			data = pingFrame
		}
		_ = cn.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
		err := cn.ws.WriteMessage(websocket.TextMessage, data)
		if errc != nil {
			errc <- err
		}
		if err != nil {
			cn.end(fmt.Errorf("client: write: %w", err))
			return
		}
	}
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
	m := outMsg{data: data, errc: make(chan error, 1)}
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
	c := cn.c
	r.res = make(chan result, 1)
	c.mu.Lock()
	if cn.ended {
		c.mu.Unlock()
		return errConnLost
	}
	cn.pending = append(cn.pending, r)
	c.mu.Unlock()
	err := cn.send(ctx, f)
	if err != nil && !errors.Is(err, errConnLost) {
		// Not sent: no answer will come.
		c.mu.Lock()
		for i, p := range cn.pending {
			if p == r {
				cn.pending = append(cn.pending[:i], cn.pending[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
	}
	return err
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
