package loadgen

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// A WebSocket client: one gorilla connection, read by one goroutine, its
// server pings answered by the read loop, its app pings sent by appPings for
// all of the worker's WebSockets.

// dialers returns one gorilla dialer per source address (one with the kernel's
// choice when there are none). Small buffers keep the generator's own memory
// down: the frames of this protocol are tiny.
func (w *worker) dialers() []*websocket.Dialer {
	mk := func(local net.Addr) *websocket.Dialer {
		nd := &net.Dialer{Timeout: dialTimeout, LocalAddr: local}
		return &websocket.Dialer{
			NetDialContext:   nd.DialContext,
			HandshakeTimeout: dialTimeout,
			ReadBufferSize:   1024,
			WriteBufferSize:  512,
		}
	}
	as := w.sourceAddrs()
	ds := make([]*websocket.Dialer, len(as))
	for i, a := range as {
		ds[i] = mk(a)
	}
	return ds
}

func (w *worker) dial(ctx context.Context, d *websocket.Dialer, g int, readers *sync.WaitGroup) {
	atomic.AddInt64(&w.c.Dialed, 1)
	u, err := w.clientURL(g)
	if err != nil {
		atomic.AddInt64(&w.c.FailedDials, 1)
		return
	}
	conn, resp, err := d.DialContext(ctx, u, http.Header{})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		w.dialFailed(g, err)
		return
	}
	now := time.Now()
	c := &client{conn: conn, nextPing: now.Add(w.spec.Every).UnixNano()}
	c.lastSent.Store(now.UnixNano())
	conn.SetPingHandler(func(data string) error {
		atomic.AddInt64(&w.c.PingsIn, 1)
		if c.silent.Load() {
			return nil
		}
		if err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeWait)); err != nil {
			return nil // the read loop sees the broken connection
		}
		c.lastSent.Store(time.Now().UnixNano())
		atomic.AddInt64(&w.c.Keepalives, 1)
		return nil
	})
	w.opened(c)
	readers.Add(1)
	go func() {
		defer readers.Done()
		w.read(c)
	}()
}

// read consumes the client's frames until the connection ends and classifies
// the end. A silent client keeps reading (it must see the close frame) but its
// ping handler no longer answers.
func (w *worker) read(c *client) {
	first := true
	var buf bytes.Buffer
	var err error
	for {
		var typ int
		var r io.Reader
		typ, r, err = c.conn.NextReader()
		if err != nil {
			break
		}
		if typ != websocket.TextMessage {
			if _, err = io.Copy(io.Discard, r); err != nil {
				break
			}
			w.count(c, typeBinary)
			continue
		}
		buf.Reset()
		if _, err = buf.ReadFrom(r); err != nil {
			break
		}
		kind, ok := frameType(buf.Bytes())
		if !ok {
			kind = typeInvalid
		}
		w.count(c, kind)
		if first {
			first = false
			if kind == "welcome" {
				w.welcome(buf.Bytes())
			}
		}
		if buf.Cap() > 64<<10 {
			buf = bytes.Buffer{} // one large snapshot should not pin memory for the run
		}
	}
	at := time.Now()
	code := -1
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		code = ce.Code
	}
	w.ended(c, at, code, err)
}

// appPings sends {"type":"ping"} from every live, non-silent client once per
// spec.Every from its connection on, as a chat client's timer would, from one
// goroutine so each connection has a single writer.
func (w *worker) appPings(ctx context.Context) {
	if w.spec.Every <= 0 {
		return
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		cs := w.clients
		w.mu.Unlock()
		now := time.Now().UnixNano()
		for _, c := range cs {
			if ctx.Err() != nil {
				return
			}
			if c.conn == nil || c.nextPing > now || c.silent.Load() || c.closed.Load() {
				continue
			}
			c.nextPing += int64(w.spec.Every)
			_ = c.conn.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.conn.WriteMessage(websocket.TextMessage, appPing); err != nil {
				atomic.AddInt64(&w.c.Errors, 1)
				continue
			}
			c.lastSent.Store(time.Now().UnixNano())
			atomic.AddInt64(&w.c.Keepalives, 1)
		}
	}
}
