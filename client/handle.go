package client

import (
	"github.com/presenced/presenced/protocol"
)

// handle applies a frame from cn to the state, answers the call awaiting
// it, and passes it on to Events. It runs on cn's reader.
func (c *Client) handle(cn *conn, f protocol.Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var answered *request
	switch f := f.(type) {
	case *protocol.Pong:
		return
	case *protocol.Joined:
		answered = cn.takeLocked("joined", f.Channel)
		if _, want := c.joined[f.Channel]; !want {
			break // left since the join went out: its leave follows
		}
		st := c.channels[f.Channel]
		if st == nil {
			st = newChanState()
			c.channels[f.Channel] = st
		}
		st.snapshot(f, cn.gen)
	case *protocol.Left:
		// Also unasked: a refreshed token that no longer allows the channel.
		delete(c.channels, f.Channel)
		delete(c.joined, f.Channel)
		delete(c.loaded, f.Channel)
		answered = cn.takeLocked("left", f.Channel)
	case *protocol.Presence:
		if st := c.channels[f.Channel]; st != nil && st.gen == cn.gen {
			st.diff(f)
		}
	case *protocol.TypingUsers:
		if st := c.channels[f.Channel]; st != nil && st.gen == cn.gen {
			st.typingUsers(f)
		}
	case *protocol.MembersPage:
		answered = cn.takeLocked("members", f.Channel)
		if st := c.channels[f.Channel]; answered != nil && st != nil && st.gen == cn.gen {
			st.page(f, answered.after)
		}
	case *protocol.Watching:
		if answered = cn.takeLocked("watching", ""); answered != nil {
			c.users = watching(c.users, answered.uids, f)
		}
	case *protocol.Status:
		status(c.users, f)
	case *protocol.Error:
		// An error with a ref answers a chat, which awaits no answer.
		if f.Ref == nil {
			if r := cn.takeErrorLocked(f.Channel); r != nil {
				r.res <- result{err: &ServerError{Message: f.Error, Channel: f.Channel}}
			}
		}
	}
	if answered != nil {
		answered.res <- result{frame: f}
	}
	c.emitLocked(f)
}
