package presence

import (
	"slices"
	"unique"
)

// What this node counts of its users' connections, and the changes it
// queues for the Engine from those counts: a user's connections and away
// ones (ChangeUser), and its connections in each channel (ChangeMember).
// The Engine hears a count, never a connection, so the count is the one
// rule for when a user is online or a member here.

// connState is a live connection: a Client, or a user's lease.
type connState struct {
	uid       string
	channels  []string
	reprieved int64 // the stall (UnixNano) after which its timeout was put off
	away      bool  // a lease never is
}

// userState counts one user's live connections on this node. During a grace
// period conns is 0 and held lists the channels the last one had joined;
// engine counts include the grace period as one connection.
type userState struct {
	conns int32 // live Clients, plus one for a lease
	away  int32 // of those, the away ones
	// How many of its live connections joined each channel: first by its
	// own list of channels, each other one in chans (a user joins few), so
	// a user with one connection needs no chans. first is nil once it went;
	// the next connection to come takes its place.
	first *connState
	chans []chanCount
	extra *userExtra // a lease, a grace period or a reprieve, which few users have
}

// userExtra is the part of a userState that most users never need, apart so
// that they do not pay for it.
type userExtra struct {
	lease     *connState
	inGrace   bool
	graceAway bool // the last connection, which the grace period stands for, was away
	held      []string
	reprieved int64 // the stall (UnixNano) after which its lease or grace was put off
}

// ext returns u's extra, made if u had none.
func (u *userState) ext() *userExtra {
	if u.extra == nil {
		u.extra = new(userExtra)
	}
	return u.extra
}

// tidy drops u's extra once it holds nothing. A reprieve keeps it: a
// deadline is put off once per stall, also the deadline of a later lease.
func (u *userState) tidy() {
	if x := u.extra; x != nil && x.lease == nil && !x.inGrace && x.held == nil && x.reprieved == 0 {
		u.extra = nil
	}
}

func (u *userState) lease() *connState {
	if u.extra == nil {
		return nil
	}
	return u.extra.lease
}

func (u *userState) inGrace() bool { return u.extra != nil && u.extra.inGrace }

func (u *userState) count() int {
	if u.inGrace() {
		return int(u.conns) + 1
	}
	return int(u.conns)
}

func (u *userState) awayCount() int {
	if u.inGrace() && u.extra.graceAway {
		return int(u.away) + 1
	}
	return int(u.away)
}

// isAway reports whether every connection of u here is away.
func (u *userState) isAway() bool {
	n := u.count()
	return n > 0 && u.awayCount() == n
}

// channels returns the channels u is a member of here.
func (u *userState) channels() []string {
	var out []string
	if u.first != nil {
		out = append(out, u.first.channels...)
	}
	for _, c := range u.chans {
		if !slices.Contains(out, c.channel) {
			out = append(out, c.channel)
		}
	}
	if u.extra != nil {
		for _, ch := range u.extra.held {
			if !slices.Contains(out, ch) {
				out = append(out, ch)
			}
		}
	}
	return out
}

// chanCount is how many of a user's live connections joined a channel.
type chanCount struct {
	channel string
	n       int
}

// joined returns how many of u's live connections joined channel.
func (u *userState) joined(channel string) int {
	n := 0
	if u.first != nil && slices.Contains(u.first.channels, channel) {
		n = 1
	}
	for _, c := range u.chans {
		if c.channel == channel {
			return n + c.n
		}
	}
	return n
}

// addJoined adds d to the connections of u other than first that joined
// channel.
func (u *userState) addJoined(channel string, d int) {
	for i := range u.chans {
		if u.chans[i].channel == channel {
			if u.chans[i].n += d; u.chans[i].n <= 0 {
				u.chans = slices.Delete(u.chans, i, i+1)
			}
			return
		}
	}
	if d > 0 {
		u.chans = append(u.chans, chanCount{channel, d})
	}
}

func (u *userState) memberCount(channel string) int {
	n := u.joined(channel)
	if u.inGrace() && slices.Contains(u.extra.held, channel) {
		n++
	}
	return n
}

// joinCountLocked counts cs in channel, if it had not joined it.
func (n *Node) joinCountLocked(cs *connState, u *userState, channel string) {
	if !slices.Contains(cs.channels, channel) {
		// One copy of the name for all its members, not one per connection
		// for as long as it lasts (a name from a request is a copy of its own).
		channel = unique.Make(channel).Value()
		cs.channels = append(cs.channels, channel)
		if cs != u.first {
			u.addJoined(channel, 1)
		}
		n.setMemberLocked(channel, cs.uid, u)
	}
}

// leaveCountLocked counts cs out of channel, once channel is out of its
// list.
func (n *Node) leaveCountLocked(cs *connState, u *userState, channel string) {
	if cs != u.first {
		u.addJoined(channel, -1)
	}
	n.setMemberLocked(channel, cs.uid, u)
}

// setUserLocked queues u's counts for the Engine. was is whether u was
// away here before the change: if that turned, each of its memberships
// carries the news to its channel.
func (n *Node) setUserLocked(uid string, u *userState, was bool) {
	n.queueLocked(Change{Kind: ChangeUser, UID: uid, N: u.count(), Away: u.awayCount()})
	if u.isAway() != was {
		for _, ch := range u.channels() {
			n.setMemberLocked(ch, uid, u)
		}
	}
}

func (n *Node) setMemberLocked(channel, uid string, u *userState) {
	c := Change{Kind: ChangeMember, Channel: channel, UID: uid, N: u.memberCount(channel)}
	if u.isAway() {
		c.Away = 1
	}
	n.queueLocked(c)
}

// queueLocked queues c for the Engine, behind the changes made before it.
func (n *Node) queueLocked(c Change) {
	_, _ = n.out.Push(c) // unbounded and never closed: no error
}

// sendOps hands the queued changes to the Engine, one goroutine at a time
// and in order, and returns once those queued before it was called are
// applied: what the caller changed is then in the Engine and, for the
// in-memory one, in the view.
func (n *Node) sendOps() {
	n.out.Flush(n.engine.Apply)
}
