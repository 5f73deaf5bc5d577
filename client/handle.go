package client

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/presenced/presenced/protocol"
)

// handle applies a frame from cn to the state, answers the call awaiting
// it, and passes it on to Events. It runs on cn's reader. A frame that
// fails the checks of check.go is neither applied nor passed on; the
// error it returns, for a server that cannot be followed any more, ends
// the connection.
func (c *Client) handle(cn *conn, f protocol.Frame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var answered *request
	switch f := f.(type) {
	case *protocol.Pong:
		c.pongLocked(cn)
		return nil
	case *protocol.Welcome:
		// The first came before the connection started; another would
		// mean a new session on the same socket, which no server starts.
		return fmt.Errorf("%w: a second welcome", ErrProtocol)
	case *protocol.Joined:
		if answered = cn.takeLocked("joined", f.Channel); answered == nil {
			c.ignoreLocked(f, errors.New("a snapshot not asked for"))
			return nil
		}
		if err := checkJoined(f); err != nil {
			answered.res <- result{err: err}
			c.ignoreLocked(f, err)
			return nil
		}
		if _, want := c.joined[f.Channel]; !want {
			break // left since the join went out: its leave follows
		}
		st := c.channels[f.Channel]
		if st == nil {
			st = newChanState()
			c.channels[f.Channel] = st
		}
		old := st.members
		st.snapshot(f, cn.gen)
		c.learnLocked(f.Members, f.Users)
		if f.Mode == protocol.ModeInvisible {
			own := c.records[c.self]
			own.Mode = protocol.ModeInvisible
			c.records[c.self] = own
		}
		c.forgetLocked(maps.Keys(old), st.members)
	case *protocol.Left:
		// Also unasked: a refreshed token that no longer allows the channel.
		c.dropChannelLocked(f.Channel)
		delete(c.joined, f.Channel)
		delete(c.loaded, f.Channel)
		answered = cn.takeLocked("left", f.Channel)
	case *protocol.Presence:
		st := c.followedLocked(cn, f.Channel)
		if err := checkDiff(f); st == nil || err != nil {
			c.ignoreLocked(f, cmpOr(err, errNotFollowed))
			return nil
		}
		st.diff(f)
		c.learnLocked(f.Joins, f.Users)
		c.updateLocked(f.Updated)
		c.forgetLocked(slices.Values(f.Leaves), nil)
	case *protocol.TypingUsers:
		st := c.followedLocked(cn, f.Channel)
		if err := checkTyping(f); st == nil || err != nil {
			c.ignoreLocked(f, cmpOr(err, errNotFollowed))
			return nil
		}
		st.typingUsers(f)
	case *protocol.MembersPage:
		if answered = cn.takeLocked("members", f.Channel); answered == nil {
			c.ignoreLocked(f, errors.New("a page not asked for"))
			return nil
		}
		if err := checkPage(f, answered.after, answered.limit); err != nil {
			answered.res <- result{err: err}
			c.ignoreLocked(f, err)
			return nil
		}
		if st := c.followedLocked(cn, f.Channel); st != nil {
			removed := st.page(f, answered.after)
			c.learnLocked(f.Members, f.Users)
			c.forgetLocked(slices.Values(removed), st.members)
		}
	case *protocol.Watching:
		if answered = cn.takeLocked("watching", ""); answered == nil {
			c.ignoreLocked(f, errors.New("a watch list not asked for"))
			return nil
		}
		if err := checkWatching(f); err != nil {
			answered.res <- result{err: err}
			c.ignoreLocked(f, err)
			return nil
		}
		old := c.users
		c.users = watching(old, answered.uids, f)
		for _, uid := range f.Online {
			if st := c.users[uid].State; st == Active || st == Away {
				c.records[uid] = f.Users[uid]
			}
		}
		c.forgetLocked(maps.Keys(old), nil)
	case *protocol.Status:
		if err := checkStatus(f); err != nil {
			c.ignoreLocked(f, err)
			return nil
		}
		watched := onlyWatched(c.users, f)
		if watched == nil {
			c.ignoreLocked(f, errNotWatched)
			return nil
		}
		status(c.users, watched)
		c.learnLocked(watched.Online, watched.Users)
		c.updateLocked(watched.Updated)
		c.forgetLocked(slices.Values(watched.Offline), nil)
		c.emitLocked(watched)
		return nil
	case *protocol.Error:
		// An error with a ref answers a chat, which awaits no answer.
		if f.Ref != nil {
			break
		}
		var r *request
		if f.Channel == "" {
			// A set between its pings goes first: the server answered the
			// watches sent before it already.
			r = cn.takeSetErrorLocked()
		}
		if r == nil {
			r = cn.takeErrorLocked(f.Channel)
		}
		if r != nil {
			r.res <- result{err: &ServerError{Message: f.Error, Channel: f.Channel}}
		}
	}
	if answered != nil {
		answered.res <- result{frame: f}
	}
	c.emitLocked(f)
	return nil
}

var errNotFollowed = errors.New("about a channel not joined on this connection")

// followedLocked returns the state of channel ch if it holds cn's
// snapshot, else nil: frames about a channel the Client never joined, or
// joined on an earlier connection only, must not touch its state.
func (c *Client) followedLocked(cn *conn, ch string) *chanState {
	if st := c.channels[ch]; st != nil && st.gen == cn.gen {
		return st
	}
	return nil
}

// ignoreLocked notes a frame left unapplied: a warning when the frame
// cannot be right, a debug line when it is only not for this Client (a
// channel it is not in, a user it does not watch, an answer it did not
// ask for).
func (c *Client) ignoreLocked(f protocol.Frame, why error) {
	if errors.Is(why, ErrProtocol) {
		c.log.Warn("client: frame ignored", "type", f.Type(), "err", why)
		return
	}
	c.log.Debug("client: frame ignored", "type", f.Type(), "why", why)
}
