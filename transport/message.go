package transport

import (
	"bytes"
	"encoding/json"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// The messages a connection's reader reads (reader.go), acted on.

// message acts on a whole message of n bytes the client sent: data, or
// nil for a binary one, which is only a keepalive. Both the reader through
// gorilla and the quick path (reader.go) come here. An error ends the
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
	c.text(data)
	return nil
}

// text acts on a text frame within the limits, from a WebSocket or a
// stream's POST (sse_post.go): parsed and handed to the inbox, or answered
// with an error frame there.
func (c *conn) text(data []byte) {
	if bytes.Equal(data, pingText) {
		c.deliver(inboxItem{frame: protocol.Ping{}})
		return
	}
	if !utf8.Valid(data) {
		c.closeWith(protocol.CloseInvalidPayload, protocol.ReasonInvalidUTF8, reasonInvalid)
		return
	}
	f, err := protocol.ParseClient(data)
	if err != nil {
		c.deliver(inboxItem{err: err.Error(), payload: namedChannel(data)})
		return
	}
	if _, ok := f.(protocol.Silence); ok && c.hub.demo {
		// The reader's own business: it counts the keepalives.
		c.silenced.Store(true)
	}
	c.deliver(inboxItem{frame: f})
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

func (c *conn) pongHandler(string) error {
	c.controlKeepalive(false)
	return nil
}

// touch counts an inbound frame as a keepalive.
func (c *conn) touch() {
	if !c.stopped.Load() {
		c.hub.node.Touch(c)
	}
}

// admit applies the inbound limits to a frame of size bytes and reports
// whether to act on it. The first frame over the limit gets an error frame;
// a connection that stays over it is closed.
func (c *conn) admit(size int) bool {
	switch c.rate.check(&c.hub.limits, time.Now(), size) {
	case accept:
		return true
	case cutOff:
		c.closeWith(protocol.ClosePolicyViolation, protocol.ReasonRateLimit, reasonFlood)
	default:
		if c.rate.refused == 1 {
			c.deliver(inboxItem{err: "too many messages: slow down, this one was dropped"})
		}
	}
	return false
}
