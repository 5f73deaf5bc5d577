package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

func (t *drainTask) run() { (*conn)(t).drainInbox() }

// followWait bounds how long a join or watch waits for the state of what it
// follows, past which the state follows as diffs: 5 s, and less than the
// timeout, so a reader held up by a stalled engine still counts as alive.
func (h *Hub) followWait() time.Duration { return min(5*time.Second, h.Timeout()/4) }

// handle acts on one item of c's inbox, in its turn. Whatever the client
// sent, the answer is a frame; a bad one gets an error frame and the
// connection stays open.
func (c *conn) handle(it inboxItem) {
	h := c.hub
	if it.end != notEnding {
		c.ended(it.end)
		return
	}
	if it.err != "" {
		c.replyError(it.err, it.payload)
		return
	}
	if it.pong {
		c.pong(it.payload)
		return
	}
	switch f := it.frame.(type) {
	case protocol.Ping:
		if !c.push(pongAnswer) {
			c.closeSlow()
		}
	case protocol.Silence:
		if !h.demo {
			c.replyError(`"silence" is a demo aid, accepted only in demo mode`, "")
		}
	case protocol.Join:
		if !h.mayJoin(c.sess(), f.Channel) {
			c.replyError(errNotAllowed, f.Channel)
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), it.at.Add(h.followWait()))
		defer cancel()
		if err := h.node.Join(ctx, c, f.Channel); err != nil {
			c.failed(it, err.Error(), f.Channel, nil)
		}
	case protocol.Leave:
		if err := h.node.Leave(c, f.Channel); err != nil {
			c.replyError(err.Error(), f.Channel)
		}
	case protocol.Watch:
		var refused []string
		uids := slices.DeleteFunc(slices.Clone(f.UIDs), func(uid string) bool {
			if !h.mayWatch(c.sess(), uid) {
				refused = append(refused, uid)
				return true
			}
			return false
		})
		ctx, cancel := context.WithDeadline(context.Background(), it.at.Add(h.followWait()))
		defer cancel()
		if err := h.node.Watch(ctx, c, uids); err != nil {
			c.failed(it, err.Error(), "", nil)
			return
		}
		if len(refused) > 0 {
			c.replyError(notAllowedToWatch(refused), "")
		}
	case protocol.Members:
		// From the node's view, queued in order with the channel's diffs.
		if err := h.node.SendMembers(c, f.Channel, f.After, f.Limit); err != nil {
			c.replyError(err.Error(), f.Channel)
		}
	case protocol.Activity:
		if err := h.node.SetActivity(c, f.State == "away"); err != nil {
			c.replyError(err.Error(), "")
		}
	case protocol.Refresh:
		if err := c.refresh(f.Token); err != nil {
			c.replyError(err.Error(), "")
		}
	case protocol.Set:
		if err := h.node.Set(c, f); err != nil {
			c.replyError(err.Error(), "")
		}
	case protocol.Chat:
		h.m.chats.Inc()
		ctx, cancel := context.WithDeadline(context.Background(), it.at.Add(h.handover))
		defer cancel()
		c.handedOver(it, "chat", f.Channel, f.Ref, h.node.Chat(ctx, c, f.Channel, f.Text))
	case protocol.Typing:
		ctx, cancel := context.WithDeadline(context.Background(), it.at.Add(h.handover))
		defer cancel()
		c.handedOver(it, "typing", f.Channel, nil, h.node.Typing(ctx, c, f.Channel))
	case protocol.Custom:
		if h.onMessage == nil {
			c.replyError(fmt.Sprintf("unknown type %q", protocol.Truncate(f.Kind)), "")
			return
		}
		if err := h.onMessage(c.life.ctx, c.uid, f.Kind, f.Raw); err != nil {
			c.failed(it, err.Error(), "", nil)
		}
	}
}

// failed answers a frame that could not be handled with an error frame, or,
// if c is closing and nobody would read it, counts the frame as lost.
func (c *conn) failed(it inboxItem, msg, channel string, ref json.RawMessage) {
	if c.stopped.Load() {
		c.lost(it)
		return
	}
	c.reply(protocol.Error{Error: msg, Channel: channel, Ref: ref})
}

// notAllowedToWatch names the user IDs a watch frame may not have, the
// first few of them in full.
func notAllowedToWatch(uids []string) string {
	const shown = 10
	names := make([]string, 0, shown)
	for _, uid := range uids[:min(len(uids), shown)] {
		names = append(names, strconv.Quote(uid))
	}
	msg := "not allowed to watch " + strings.Join(names, ", ")
	if len(uids) > shown {
		msg += fmt.Sprintf(" and %d more", len(uids)-shown)
	}
	return msg + "; the others are watched"
}
