package transport

import (
	"bytes"
	"errors"
	"time"

	"github.com/presenced/presenced/internal/queue"
	"github.com/presenced/presenced/protocol"
)

// Every frame a connection sends is handled in the order it was sent, by
// one handler at a time: the connection's inbox. The reader parses a frame
// and, if the inbox is idle and the frame never waits (a ping, a leave, an
// activity), handles it at once; any other goes into the inbox, which a
// worker drains. A frame that waits for the engine (a chat handed to Redis,
// a join waiting for a channel's state) holds up the frames behind it, not
// the reader, which goes on reading, counting keepalives and refusing what
// is over the limits. A close goes into the inbox too, behind what was
// read before it: a chat followed by the client's FIN reaches the channel.
const (
	// inboxLimit bounds the frames waiting in one inbox; past it a frame is
	// refused with an error frame, in its turn.
	inboxLimit = 64
	// chatHandover bounds how long a chat or typing frame may wait for the
	// engine, from when it was read; past it the client gets an error frame.
	chatHandover = 2 * time.Second
)

// errInboxFull answers the first frame refused by a full inbox.
const errInboxFull = "too many frames waiting to be handled: slow down, this one was dropped"

// inboxItem is one item of an inbox: a frame the client sent, or an error
// frame the reader decided to send in its turn, or the connection's end.
type inboxItem struct {
	frame   protocol.Frame // a parsed client frame, or nil
	err     string         // an error frame to send instead
	pong    bool           // a WebSocket pong to send, with payload
	payload string         // the pong's payload, or the channel the error names
	at      time.Time      // when it was read: the engine's waits count from it
	end     ending         // the connection ends here
}

// ending is what the last items of an inbox do, after the frames before
// them were handled.
type ending uint8

const (
	notEnding ending = iota
	// leaving: the connection closes. It stops counting for presence,
	// and OnMessage's context ends.
	leaving
	// finished: the reader stopped as well. The Hub forgets the
	// connection, which is then gone.
	finished
)

// deliver hands a frame the reader parsed (or an error frame it decided to
// send) to the inbox, or handles it at once when that keeps the order and
// cannot wait. Called by the reader only.
func (c *conn) deliver(it inboxItem) {
	if quick(it.frame) && c.inbox.Claim() {
		c.handle(it)
		c.inbox.Drain(c.handle) // what came meanwhile: a close
		return
	}
	it.at = time.Now()
	if f, ok := it.frame.(protocol.Custom); ok {
		f.Raw = bytes.Clone(f.Raw) // the reader's buffer is reused
		it.frame = f
	}
	start, err := c.inbox.Push(it)
	switch {
	case errors.Is(err, queue.ErrFull):
		c.hub.m.refused.Inc()
		if !c.rate.overflowed {
			c.rate.overflowed = true
			start, err = c.inbox.Append(inboxItem{err: errInboxFull, at: it.at})
		}
	case err == nil:
		c.rate.overflowed = false
	}
	if start && err == nil {
		c.hub.workers.run((*drainTask)(c))
	}
}

// quick reports whether handling f never waits: not on the engine, nor on
// the embedder's OnMessage.
func quick(f protocol.Frame) bool {
	switch f.(type) {
	case protocol.Join, protocol.Watch, protocol.Chat, protocol.Typing, protocol.Custom:
		return false
	}
	return true
}

// drainInbox is the worker that handles c's inbox until it is empty.
func (c *conn) drainInbox() { c.inbox.Drain(c.handle) }

// end queues c's end behind the frames it sent before. If nothing waits, it
// ends c at once, on the caller's goroutine.
func (c *conn) end(how ending) {
	if c.inbox.Close(inboxItem{end: how}) {
		c.inbox.Drain(c.handle)
	}
}

// ended runs when c's end comes out of its inbox.
func (c *conn) ended(how ending) {
	h := c.hub
	if c.life != nil {
		c.life.cancel()
	}
	h.node.Disconnect(c)
	if how == finished {
		h.forget(c)
		h.m.connections.Dec()
		h.readers.Done()
	}
}

// lost counts a frame a closing connection sent that could not be handled:
// there is no sender left to tell.
func (c *conn) lost(it inboxItem) {
	c.hub.m.lost.WithLabelValues(frameType(it.frame)).Inc()
}

// frameType is the "type" label of presenced_frames_lost_total.
func frameType(f protocol.Frame) string {
	switch f.(type) {
	case protocol.Chat:
		return "chat"
	case protocol.Typing:
		return "typing"
	case protocol.Join:
		return "join"
	case protocol.Watch:
		return "watch"
	case protocol.Custom:
		return "custom"
	}
	return "other"
}
