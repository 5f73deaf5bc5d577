package transport

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/presenced/presenced/protocol"
)

// Server-Sent Events: the protocol of /ws over plain HTTP, for networks
// whose proxies strip the WebSocket upgrade. GET /sse is a connection like
// a WebSocket (the same conn, inbox, limits and node calls); its frames go
// out as events of the response, written by the request's goroutine
// (stream), and its client's frames come in as POSTs to /sse/{session}
// (sse_post.go), from this node or, forwarded through the engine, from any
// other (sse_forward.go).

// sseKeepalive is how often a stream carries a comment, whatever else it
// carries, so that proxies do not cut it as idle.
const sseKeepalive = 15 * time.Second

// sessionBytes is how many random bytes name a stream: 128 bits.
const sessionBytes = 16

// sseStream is what a stream's conn has beside a WebSocket's.
type sseStream struct {
	id   string        // the session: a capability, never logged
	wake chan struct{} // the writer has frames to write (runWriterLocked)
	gone chan struct{} // closed by hangUp: the response ends
	once sync.Once
	// in serializes the stream's POSTs: it is the reader's side of the
	// conn, which owns rate.
	in sync.Mutex
}

func (s *sseStream) wakeWriter() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// hangUp ends the response without a close event: what closing a
// WebSocket's socket is.
func (s *sseStream) hangUp() { s.once.Do(func() { close(s.gone) }) }

// newSession names a stream: this node's engine address (when it forwards
// between nodes, so another node's POST finds it) and 128 random bits,
// base64url.
func (h *Hub) newSession() string {
	var b [sessionBytes]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	id := base64.RawURLEncoding.EncodeToString(b[:])
	if addr := h.node.Address(); addr != "" {
		return base64.RawURLEncoding.EncodeToString([]byte(addr)) + "." + id
	}
	return id
}

// sessionNode returns the engine address a session names, "" for one made
// by a node that does not forward, and false for what is no session.
func sessionNode(id string) (string, bool) {
	node, random, found := strings.Cut(id, ".")
	if !found {
		node, random = "", id
	}
	if len(random) != base64.RawURLEncoding.EncodedLen(sessionBytes) {
		return "", false
	}
	if _, err := base64.RawURLEncoding.DecodeString(random); err != nil {
		return "", false
	}
	addr, err := base64.RawURLEncoding.DecodeString(node)
	if err != nil || (found && len(addr) == 0) {
		return "", false
	}
	return string(addr), true
}

// session returns the live stream named id on this node, or nil.
func (h *Hub) session(id string) *conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id]
}

// serveSSE opens a stream: the rules of /ws for origin, host, identity,
// channels and connection counts, then the frames a WebSocket would get, as
// events, until the connection closes.
func (h *Hub) serveSSE(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "text/event-stream")
		return // what a GET would start with, and no stream
	}
	sess, channels, ok := h.identify(w, r)
	if !ok {
		return
	}
	c, sess, channels, ok := h.newConn(w, sess, channels)
	if !ok {
		return
	}
	s := &sseStream{id: h.newSession(), wake: make(chan struct{}, 1), gone: make(chan struct{})}
	c.sse = s
	h.mu.Lock()
	if h.refusedClosingLocked(c) {
		h.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	h.live[c] = struct{}{}
	h.sessions[s.id] = c
	h.readers.Add(1)
	h.mu.Unlock()
	h.m.connections.Inc()

	rc := http.NewResponseController(w)
	// The server's read timeout, if it has one, would end the request's
	// context, and so the stream, while the client only listens.
	_ = rc.SetReadDeadline(time.Time{})
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no") // nginx: pass each event on as it comes
	w.WriteHeader(http.StatusOK)
	_ = rc.SetWriteDeadline(time.Now().Add(h.writeTimeout))
	if err := rc.Flush(); err != nil {
		c.writeFailed(err)
	}

	c.open(sess, channels, s.id)

	c.stream(w, rc, r.Context().Done())

	// The reader's finish: no POST reaches c from now on.
	h.mu.Lock()
	delete(h.sessions, s.id)
	h.mu.Unlock()
	c.mu.Lock()
	c.markClosingLocked(reasonClient)
	c.mu.Unlock()
	c.end(finished)
}

// stream is a stream's writer, on the request's goroutine: it writes what
// is queued whenever runWriterLocked wakes it, a keepalive comment every
// Hub.sseKeepalive, and returns once the close event is out, the client
// went (done) or a write failed.
func (c *conn) stream(w io.Writer, rc *http.ResponseController, done <-chan struct{}) {
	s := c.sse
	keepalive := time.NewTicker(c.hub.sseKeepalive)
	defer keepalive.Stop()
	for {
		select {
		case <-done:
			return
		case <-s.gone:
			return
		case <-keepalive.C:
			_ = rc.SetWriteDeadline(time.Now().Add(c.hub.writeTimeout))
			_, err := io.WriteString(w, ": keepalive\n\n")
			if err == nil {
				err = rc.Flush()
			}
			if err != nil {
				c.writeFailed(err)
				return
			}
		case <-s.wake:
			if c.writeEvents(w, rc) {
				return
			}
		}
	}
}

// writeEvents writes c's queue until it is empty, one event per frame, and
// reports true when the stream is over: its close event went out, or a
// write failed.
func (c *conn) writeEvents(w io.Writer, rc *http.ResponseController) bool {
	for {
		c.mu.Lock()
		batch, closeMsg := c.nextLocked()
		if len(batch) == 0 {
			if closeMsg == nil {
				c.mu.Unlock()
				return false
			}
			c.mu.Unlock()
			c.writeCloseEvent(w, rc, *closeMsg)
			return true
		}
		c.mu.Unlock()
		_ = rc.SetWriteDeadline(time.Now().Add(c.hub.writeTimeout))
		var err error
		for _, f := range batch {
			if c.stopped.Load() {
				break
			}
			if f.Data == nil {
				continue // a WebSocket ping: a stream has none
			}
			tap(false, f.Data)
			if err = writeEvent(w, f.Data); err != nil {
				break
			}
		}
		if err == nil {
			err = rc.Flush()
		}
		putQueue(batch)
		if err != nil {
			c.writeFailed(err)
			return true
		}
	}
}

// writeCloseEvent writes the close event of msg, a WebSocket close frame's
// payload, as the stream's last.
func (c *conn) writeCloseEvent(w io.Writer, rc *http.ResponseController, msg []byte) {
	f := protocol.Close{}
	if len(msg) >= 2 {
		f.Code, f.Reason = int(binary.BigEndian.Uint16(msg)), string(msg[2:])
	}
	data := protocol.MustEncode(f)
	c.hub.m.sent(data.Type)
	tap(false, data.Data)
	_ = rc.SetWriteDeadline(time.Now().Add(c.hub.writeTimeout))
	if err := writeEvent(w, data.Data); err == nil {
		_ = rc.Flush()
	}
}

// writeEvent writes one event whose data is frame. The frames are compact
// JSON, one line; a line break would start a data line of its own, which a
// client joins back.
func writeEvent(w io.Writer, frame []byte) error {
	for {
		line, rest, more := bytes.Cut(frame, []byte("\n"))
		if _, err := io.WriteString(w, "data: "); err != nil {
			return err
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if _, err := io.WriteString(w, "\n"); err != nil {
			return err
		}
		if !more {
			break
		}
		frame = rest
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// errNoSession answers a POST for a session no node holds.
var errNoSession = errors.New("no such session: it ended, or never was; open a new stream with GET /sse")
