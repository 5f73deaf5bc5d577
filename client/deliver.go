package client

import (
	"github.com/presenced/presenced/protocol"
)

// Events carries two kinds of event. Data events (isData) are the
// application's messages: Events never drops one. Notices (snapshots,
// diffs, typing, status, answers, the welcome, the Client's StateChange)
// describe state that Channel and User keep exact anyway: one that finds
// the buffer full is dropped and counted.
//
// A data event that finds no room is held (Client.held, in order) and the
// reader hands it over itself, waiting for the application, before it
// reads the next frame (conn.deliver); the socket is not read meanwhile,
// so TCP carries the back-pressure to the server. While anything is held,
// every notice is dropped and every later data event is held behind it, so
// no event overtakes another. The reader waits only while its connection
// is live: before that (Dial, or the joins after a reconnect) the
// application may not be able to read yet, or the joins would wait on it,
// so data events pile up in held instead, to be handed over once live.

// isData reports whether ev is a data event, never dropped: a chat, a
// publish, a message, or the error that says a chat of this Client's was
// not delivered (its Ref set).
func isData(ev protocol.Frame) bool {
	switch f := ev.(type) {
	case *protocol.Chat, *protocol.Publish, *protocol.Message:
		return true
	case *protocol.Error:
		return f.Ref != nil
	}
	return false
}

// emitLocked passes ev on to Events, in the order of the state changes
// (c.mu is held): at once if there is room and nothing is held, else a
// data event is held for the reader to deliver and a notice is dropped.
func (c *Client) emitLocked(ev protocol.Frame) {
	if c.stopped {
		return
	}
	if len(c.held) == 0 {
		select {
		case c.events <- ev:
			return
		default:
		}
	}
	if isData(ev) {
		c.held = append(c.held, ev)
		return
	}
	c.dropped.Add(1)
}

// deliver hands the held data events to Events, in order, waiting for room
// without holding c.mu, while cn is live. It returns when nothing is held,
// cn is not live (what is left goes first once a connection is), cn ended,
// or the Client is closing. It runs on cn's reader, the one goroutine that
// holds data events, so held[0] stays put while it waits.
func (cn *conn) deliver() {
	c := cn.c
	for {
		c.mu.Lock()
		if len(c.held) == 0 || c.live != cn || c.stopped {
			c.mu.Unlock()
			return
		}
		ev, events := c.held[0], c.events
		c.mu.Unlock()
		select {
		case events <- ev:
		case <-cn.done:
			return
		case <-c.ctx.Done():
			return
		}
		c.mu.Lock()
		c.held[0] = nil
		c.held = c.held[1:]
		if len(c.held) == 0 {
			c.held = nil // let the array go
		}
		c.mu.Unlock()
	}
}
