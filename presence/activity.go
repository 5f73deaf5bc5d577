package presence

import "slices"

// A connection is active or away. It starts active; its client may say it is
// away or back (SetActivity), and a chat or typing frame makes it active
// again. A join does not: a user who joins while away joins away. With
// Config.AwayAfter, an active connection with none of those frames, nor a
// join, for that long turns away: the idle ring holds each active
// connection's deadline, renewed by each of them, and the Node's clock steps
// it. A keepalive never changes activity. A user is away here while every
// one of its connections here is away (a heartbeat lease never is); the
// Engine counts the away connections of every node.

// SetActivity sets c's activity, as its client said: away, or active again.
func (n *Node) SetActivity(c Client, away bool) error {
	n.mu.Lock()
	cs := n.conns[c]
	if cs == nil {
		n.mu.Unlock()
		return ErrUnknownClient
	}
	if away {
		n.idle.Remove(c)
		n.setAwayLocked(cs, true)
	} else {
		n.activeLocked(c, cs)
	}
	n.mu.Unlock()
	n.sendOps()
	return nil
}

// activeMember returns the user of c, which must have joined channel (else
// ErrNotJoined), and makes c active: for a chat or typing frame, which
// shows its user is there.
func (n *Node) activeMember(c Client, channel string) (uid string, err error) {
	n.mu.Lock()
	cs := n.conns[c]
	if cs == nil || !slices.Contains(cs.channels, channel) {
		n.mu.Unlock()
		return "", ErrNotJoined
	}
	was := cs.away
	n.activeLocked(c, cs)
	n.mu.Unlock()
	if was {
		n.sendOps()
	}
	return cs.uid, nil
}

// activeLocked makes cs, c's state, active and renews its deadline. Under
// n.mu, so that a step that finds the deadline run out sees the renewal.
func (n *Node) activeLocked(c Client, cs *connState) {
	if n.awayAfter > 0 {
		n.idle.TouchFor(c, n.awayAfter)
	}
	n.setAwayLocked(cs, false)
}

// joinedLocked renews the deadline of c, which joined a channel, if it is
// active; an away connection stays away.
func (n *Node) joinedLocked(c Client, cs *connState) {
	if n.awayAfter > 0 && !cs.away {
		n.idle.TouchFor(c, n.awayAfter)
	}
}

// setAwayLocked sets cs's activity and queues the user's new counts.
func (n *Node) setAwayLocked(cs *connState, away bool) {
	if cs.away == away {
		return
	}
	u := n.users[cs.uid]
	was := u.isAway()
	cs.away = away
	if away {
		u.away++
	} else {
		u.away--
	}
	n.setUserLocked(cs.uid, u, was)
}
