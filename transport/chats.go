package transport

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// Chats wait for the engine off the reader: at most maxPendingChats per
// connection, each handed over within chatHandover or refused with an error
// frame. A stalled engine delays chats; it never holds up the reader.
const (
	maxPendingChats = 16
	chatHandover    = 2 * time.Second
)

// pendingChat is a chat, or with typing set a typing frame (Text unused),
// or with activity set an activity frame that came after chats still
// waiting, due by its deadline.
type pendingChat struct {
	protocol.Chat
	typing   bool
	activity string // "away" or "active"
	due      time.Time
}

// queueChat hands f to the engine on a goroutine of c's own, which exists
// while chats wait, so they go out in order. Each has chatHandover from its
// arrival, however long the ones before it took. Typing frames take the
// same way, so a chat ends the typing that came before it, never the one
// after.
func (c *conn) queueChat(f protocol.Chat, typing bool) {
	what := "chat"
	if typing {
		what = "typing"
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	b := c.backlogLocked()
	// Behind the last activity frame waiting, a typing frame already there
	// starts the same typing at least as late: this one adds nothing.
	if typing && slices.ContainsFunc(b.chats[lastActivity(b.chats)+1:], func(p pendingChat) bool { return p.typing && p.Channel == f.Channel }) {
		c.mu.Unlock()
		return
	}
	if len(b.chats) >= maxPendingChats {
		c.mu.Unlock()
		c.reply(protocol.Error{Error: what + " not delivered: too many chats waiting to be sent, try again", Channel: f.Channel, Ref: f.Ref})
		return
	}
	b.chats = append(b.chats, pendingChat{Chat: f, typing: typing, due: time.Now().Add(chatHandover)})
	c.startChatsLocked(b)
}

// queueActivity queues an activity frame behind the chats and typing frames
// still waiting, which make the connection active when they are handed
// over: so the frame the client sent last says whether it is away. It
// reports false when nothing waits: the reader applies the frame itself.
func (c *conn) queueActivity(away bool) bool {
	state := "active"
	if away {
		state = "away"
	}
	c.mu.Lock()
	b := c.backlog
	if c.closing || b == nil || !b.chatting {
		c.mu.Unlock()
		return false
	}
	// Activity frames in a row: the last one says it all, so the queue
	// holds at most one between two chats.
	if n := len(b.chats); n > 0 && b.chats[n-1].activity != "" {
		b.chats[n-1].activity = state
	} else {
		b.chats = append(b.chats, pendingChat{activity: state})
	}
	c.mu.Unlock()
	return true
}

// lastActivity returns the index of the last activity frame in chats, or -1.
func lastActivity(chats []pendingChat) int {
	for i := len(chats) - 1; i >= 0; i-- {
		if chats[i].activity != "" {
			return i
		}
	}
	return -1
}

// startChatsLocked starts the goroutine that hands b's chats over, unless
// it runs; it unlocks c.mu.
func (c *conn) startChatsLocked(b *backlog) {
	start := !b.chatting
	b.chatting = true
	c.mu.Unlock()
	if start {
		go c.chatLoop()
	}
}

func (c *conn) chatLoop() {
	h := c.hub
	for {
		c.mu.Lock()
		b := c.backlog // not nil while chatting
		if len(b.chats) == 0 {
			b.chats, b.chatting = nil, false
			c.tidyLocked()
			c.mu.Unlock()
			return
		}
		f := b.chats[0]
		b.chats = b.chats[1:]
		c.mu.Unlock()
		if f.activity != "" {
			if err := h.node.SetActivity(c, f.activity == "away"); err != nil {
				c.replyError(err.Error(), "")
			}
			continue
		}
		ctx, cancel := context.WithDeadline(context.Background(), f.due)
		what := "chat"
		var err error
		if f.typing {
			what = "typing"
			err = h.node.Typing(ctx, c, f.Channel)
		} else {
			err = h.node.Chat(ctx, c, f.Channel, f.Text)
		}
		cancel()
		switch {
		case errors.Is(err, presence.ErrNotJoined):
			c.reply(protocol.Error{Error: err.Error(), Channel: f.Channel, Ref: f.Ref})
		case err != nil:
			h.log.Warn("transport: "+what+" not delivered", "uid", c.uid, "channel", f.Channel, "err", err)
			c.reply(protocol.Error{Error: what + " not delivered: " + err.Error(), Channel: f.Channel, Ref: f.Ref})
		}
	}
}
