package presence

import (
	"slices"
	"time"

	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/tracker"
)

// makeClock builds the Node's rings; the tracker applies the Slots and Tick
// defaults.
func (n *Node) makeClock(slots int, tick, lastSeenTTL, typingTTL time.Duration) error {
	ring, err := tracker.New(tracker.Config[Client]{Slots: slots, Tick: tick})
	if err != nil {
		return err
	}
	// Browsers throttle a background tab's timers but answer pings, so a
	// connection silent for half the timeout is probed.
	n.ring, err = tracker.New(tracker.Config[Client]{
		Slots:     slots,
		Tick:      tick,
		IdleAfter: ring.Timeout() / 2,
		OnIdle:    Client.Probe,
		OnOffline: n.timedOut,
		OnStep:    n.step,
	})
	if err != nil {
		return err
	}
	n.tick = n.ring.Tick()
	n.stalled = n.ring.Stalled
	bare := tracker.Config[string]{Slots: slots, Tick: tick}
	if n.leases, err = tracker.New(bare); err != nil {
		return err
	}
	if n.graces, err = tracker.New(bare); err != nil {
		return err
	}
	seen, err := tracker.New(bare)
	if err != nil {
		return err
	}
	n.v.book.init(seen, lastSeenTTL)
	typing, err := tracker.New(tracker.Config[typingKey]{Slots: slots, Tick: tick})
	if err != nil {
		return err
	}
	n.v.typing.init(typing, typingTTL)
	notes, err := tracker.New(bare)
	if err != nil {
		return err
	}
	n.v.notes.init(notes, n.tick)
	if n.expiry, err = tracker.New(tracker.Config[Client]{Slots: slots, Tick: tick}); err != nil {
		return err
	}
	n.idle, err = tracker.New(tracker.Config[Client]{Slots: slots, Tick: tick})
	return err
}

// Touch counts a keepalive of c: one lookup and one store in the ring, no
// lock.
func (n *Node) Touch(c Client) { n.ring.Touch(c) }

// SetExpiry closes c with 4401 "token expired" at t, unless SetExpiry is
// called again first; a zero t never.
func (n *Node) SetExpiry(c Client, t time.Time) {
	if t.IsZero() {
		n.expiry.Remove(c)
		return
	}
	n.expiry.TouchFor(c, time.Until(t))
}

// timedOut closes a connection silent past the timeout, unless it was
// touched between the step and this call, or a stall reprieves it.
func (n *Node) timedOut(c Client) {
	if n.ring.Online(c) {
		return
	}
	n.mu.Lock()
	cs := n.conns[c]
	if cs != nil && n.reprieveLocked(&cs.reprieved) {
		n.ring.TouchFor(c, 2*n.tick)
		cs = nil
	}
	n.mu.Unlock()
	if cs != nil {
		c.Close(protocol.CloseIdleTimeout, protocol.ReasonIdleTimeout)
	}
}

// step follows each step of the connections' ring, after its timeouts: the
// other rings step too, and the tick's coalesced presence goes out.
func (n *Node) step(took time.Duration) {
	start := time.Now()
	var expired []Client
	for _, c := range n.expiry.Advance() {
		if !n.expiry.Online(c) { // else extended since
			expired = append(expired, c)
		}
	}
	idle := n.idle.Advance()
	n.mu.Lock()
	for _, c := range idle {
		if cs := n.conns[c]; cs != nil && !n.idle.Online(c) { // else active since
			n.setAwayLocked(cs, true)
		}
	}
	for _, uid := range n.leases.Advance() {
		if u := n.users[uid]; u != nil && u.lease() != nil {
			if n.reprieveLocked(&u.extra.reprieved) {
				n.leases.TouchFor(uid, 2*n.tick)
				continue
			}
			n.endLeaseLocked(u)
		}
	}
	for _, uid := range n.graces.Advance() {
		if u := n.users[uid]; u != nil && u.inGrace() {
			if n.reprieveLocked(&u.extra.reprieved) {
				n.graces.TouchFor(uid, 2*n.tick)
				continue
			}
			n.endGraceLocked(uid, u)
			n.forgetLocked(uid, u)
		}
	}
	for _, nd := range n.v.dueNotes(time.Now()) {
		n.queueLocked(Change{Kind: ChangeExpireNote, UID: nd.uid, Until: nd.until})
	}
	n.mu.Unlock()
	// An engine keeps records as long as last seen; it drops them in
	// order with the user's other changes.
	dropped := n.v.book.step()
	n.v.forgetExpired(dropped)
	for _, uid := range dropped {
		n.queueLocked(Change{Kind: ChangeForget, UID: uid})
	}
	n.v.stepTyping()
	n.sendOps()
	for _, c := range expired {
		c.Close(protocol.CloseTokenExpired, protocol.ReasonTokenExpired)
	}
	n.v.flush()
	if n.onStep != nil {
		n.onStep(took + time.Since(start))
	}
}

// reprieveLocked reports whether a deadline that just ran out may be put
// off, and records at *last that it was.
//
// After a stall (the process was stopped or starved past a tick) the clock
// catches up at once, while what clients sent meanwhile still waits unread
// in their sockets or requests: a deadline that runs out within a timeout
// of the stall gets two more ticks, once per stall, for those to be read.
// One that was really missed ends within the timeout plus two ticks.
func (n *Node) reprieveLocked(last *int64) bool {
	st := n.stalled()
	if st.IsZero() || time.Since(st) >= n.ring.Timeout() || *last == st.UnixNano() {
		return false
	}
	*last = st.UnixNano()
	return true
}

// Heartbeat keeps uid online for one lease (Timeout) as a connection of its
// own, a member of channels (checked with CheckChannels): each heartbeat
// states the lease's channels anew.
func (n *Node) Heartbeat(uid string, channels []string) error {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return ErrClosing
	}
	u := n.users[uid]
	if u == nil || u.lease() == nil {
		cs := &connState{uid: uid}
		u = n.attachLocked(cs)
		u.ext().lease = cs
	}
	cs := u.lease()
	for _, ch := range slices.Clone(cs.channels) {
		if !slices.Contains(channels, ch) {
			cs.channels = slices.DeleteFunc(cs.channels, func(s string) bool { return s == ch })
			n.leaveCountLocked(cs, u, ch)
		}
	}
	for _, ch := range channels {
		n.joinCountLocked(cs, u, ch)
	}
	n.endGraceLocked(uid, u)
	n.leases.Touch(uid)
	n.mu.Unlock()
	n.sendOps()
	return nil
}

// endLeaseLocked ends u's heartbeat lease as a connection that went.
func (n *Node) endLeaseLocked(u *userState) {
	cs := u.extra.lease
	u.extra.lease = nil
	n.detachLocked(cs)
	u.tidy()
}
