package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/protocol"
)

// CheckChannels validates a list of channel names for one connection and
// returns it without duplicates, in order.
func (n *Node) CheckChannels(channels []string) ([]string, error) {
	var out []string
	for _, ch := range channels {
		if !protocol.ValidChannel(ch) {
			return nil, fmt.Errorf("%w: %q", protocol.ErrInvalidChannel, protocol.Truncate(ch))
		}
		if !slices.Contains(out, ch) {
			out = append(out, ch)
		}
	}
	if len(out) > n.maxChannels {
		return nil, ErrTooManyChannels
	}
	return out, nil
}

// Connect counts c as a live connection of uid, starts timing its
// keepalives and joins it to channels (already checked with CheckChannels),
// sending c a joined snapshot for each. The caller sends its own welcome
// first. ctx bounds the wait for a networked Engine to deliver the state of
// the channels; past it the state follows as diffs.
func (n *Node) Connect(ctx context.Context, c Client, uid string, channels []string) error {
	// The user's own topic carries messages and disconnects meant for it.
	topics := append(userTopics([]string{uid}), channelTopics(channels)...)
	n.follow(ctx, topics)
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		n.unfollow(topics)
		return ErrClosing
	}
	if _, dup := n.conns[c]; dup {
		n.mu.Unlock()
		n.unfollow(topics)
		return errors.New("presence: Connect: client already connected")
	}
	cs := &connState{uid: uid}
	n.conns[c] = cs
	u := n.attachLocked(cs)
	if ic, ok := c.(InfoClient); ok {
		if info := ic.Info(); info != nil {
			// Before the joins: the user's record reaches the view before
			// its memberships, and no member list goes out without it.
			n.addInfoLocked(c, uid, info)
		}
	}
	for _, ch := range channels {
		n.joinCountLocked(cs, u, ch)
	}
	n.endGraceLocked(cs.uid, u)
	if n.awayAfter > 0 {
		n.idle.TouchFor(c, n.awayAfter)
	}
	n.mu.Unlock()
	n.ring.Touch(c)
	n.sendOps()

	// The view learns of c once the engine has its edges, so each snapshot
	// counts it; a Disconnect meanwhile leaves c out.
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns[c] == cs {
		n.v.addClient(c, uid)
		for _, ch := range cs.channels {
			n.v.subscribe(c, uid, ch)
		}
	}
	return nil
}

// Joined returns the channels c has joined, in the order it joined them.
func (n *Node) Joined(c Client) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cs := n.conns[c]; cs != nil {
		return slices.Clone(cs.channels)
	}
	return nil
}

// Disconnect stops counting c: it leaves the ring, its channels lose it
// and, if it was its user's last connection, the user goes offline (after
// the grace period). Idempotent.
func (n *Node) Disconnect(c Client) {
	n.ring.Remove(c)
	n.expiry.Remove(c)
	n.idle.Remove(c)
	n.mu.Lock()
	cs := n.conns[c]
	if cs == nil {
		n.mu.Unlock()
		return
	}
	delete(n.conns, c)
	n.conns = shrink.Map(n.conns, &n.connsPeak)
	watched := n.v.removeClient(c, cs.uid, cs.channels)
	topics := append(append(userTopics([]string{cs.uid}), channelTopics(cs.channels)...), userTopics(watched)...)
	n.dropInfoLocked(c, cs.uid)
	n.detachLocked(cs)
	n.mu.Unlock()
	n.sendOps()
	n.unfollow(topics)
}

// attachLocked counts cs for its user, creating the user if needed.
func (n *Node) attachLocked(cs *connState) *userState {
	u := n.users[cs.uid]
	if u == nil {
		u = &userState{}
		n.users[cs.uid] = u
	}
	if u.first == nil {
		u.first = cs // it has joined nothing yet: chans stays right
	}
	was := u.isAway()
	u.conns++
	n.setUserLocked(cs.uid, u, was)
	return u
}

// detachLocked stops counting cs. The last connection of a user starts its
// grace period, which holds the user and cs's channels; without one the
// user leaves them and goes offline now.
func (n *Node) detachLocked(cs *connState) {
	u := n.users[cs.uid]
	was := u.isAway()
	u.conns--
	if cs.away {
		u.away--
	}
	hold := u.conns == 0 && n.grace > 0 && !n.closing
	if hold {
		x := u.ext()
		x.inGrace = true
		x.graceAway = cs.away
		x.held = append(x.held, cs.channels...)
		n.graces.TouchFor(cs.uid, n.grace)
	}
	left := cs.channels
	cs.channels = nil
	for _, ch := range left {
		n.leaveCountLocked(cs, u, ch)
	}
	if u.first == cs {
		u.first = nil
	}
	if !hold {
		n.setUserLocked(cs.uid, u, was)
		n.forgetLocked(cs.uid, u)
	}
}

func (n *Node) forgetLocked(uid string, u *userState) {
	if u.count() == 0 {
		delete(n.users, uid)
		n.users = shrink.Map(n.users, &n.usersPeak)
	}
}

// endGraceLocked ends u's grace period, if any: the channels it held that
// no live connection has joined are left, and with no connection left the
// user goes offline.
func (n *Node) endGraceLocked(uid string, u *userState) {
	if !u.inGrace() {
		return
	}
	n.graces.Remove(uid)
	was := u.isAway()
	held := u.extra.held
	u.extra.inGrace = false
	u.extra.graceAway = false
	u.extra.held = nil
	u.tidy()
	for _, ch := range held {
		n.setMemberLocked(ch, uid, u)
	}
	n.setUserLocked(uid, u, was)
}

// Join joins c to channel and sends c a joined snapshot; joining again sends
// the snapshot again. ctx bounds the wait for the channel's state, as in
// Connect.
func (n *Node) Join(ctx context.Context, c Client, channel string) error {
	if !protocol.ValidChannel(channel) {
		return protocol.ErrInvalidChannel
	}
	topic := channelTopics([]string{channel})
	n.follow(ctx, topic) // once per connection that joined
	n.mu.Lock()
	cs := n.conns[c]
	already := cs != nil && slices.Contains(cs.channels, channel)
	var err error
	switch {
	case cs == nil:
		err = ErrUnknownClient
	case !already && len(cs.channels) >= n.maxChannels:
		err = ErrTooManyChannels
	case !already:
		n.joinCountLocked(cs, n.users[cs.uid], channel)
	}
	if err == nil {
		n.joinedLocked(c, cs)
	}
	n.mu.Unlock()
	if err != nil || already {
		n.unfollow(topic)
	}
	if err != nil {
		return err
	}
	n.sendOps()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns[c] == cs {
		n.v.subscribe(c, cs.uid, channel)
	}
	return nil
}

// Leave takes c out of channel and sends it a left frame, also if c had not
// joined it.
func (n *Node) Leave(c Client, channel string) error {
	if !protocol.ValidChannel(channel) {
		return protocol.ErrInvalidChannel
	}
	n.mu.Lock()
	cs := n.conns[c]
	if cs == nil {
		n.mu.Unlock()
		return ErrUnknownClient
	}
	i := slices.Index(cs.channels, channel)
	if i >= 0 {
		cs.channels = slices.Delete(cs.channels, i, i+1)
		n.leaveCountLocked(cs, n.users[cs.uid], channel)
	}
	n.mu.Unlock()
	n.sendOps()
	n.mu.Lock()
	if n.conns[c] == cs {
		n.v.unsubscribe(c, channel)
	}
	n.mu.Unlock()
	if i >= 0 {
		n.unfollow(channelTopics([]string{channel}))
	}
	return nil
}

// Watch replaces c's watch list with uids and sends c a watching frame with
// those of them online now; status frames for them follow at ticks. ctx
// bounds the wait for the users' state, as in Connect.
func (n *Node) Watch(ctx context.Context, c Client, uids []string) error {
	uids = slices.Clone(uids)
	slices.Sort(uids)
	uids = slices.Compact(uids)
	if len(uids) > n.maxWatch {
		return fmt.Errorf("%w: at most %d user IDs", ErrTooManyWatched, n.maxWatch)
	}
	n.follow(ctx, userTopics(uids))
	n.mu.Lock()
	if n.conns[c] == nil {
		n.mu.Unlock()
		n.unfollow(userTopics(uids))
		return ErrUnknownClient
	}
	old := n.v.watch(c, uids)
	n.mu.Unlock()
	n.unfollow(userTopics(old))
	return nil
}

// Chat sends text from c's user to every member connection of channel, on
// every node, c included; c must have joined channel. It ends the user's
// typing there.
func (n *Node) Chat(ctx context.Context, c Client, channel, text string) error {
	uid, err := n.activeMember(c, channel)
	if err != nil {
		return err
	}
	frame := protocol.MustEncode(protocol.Chat{Channel: channel, From: uid, Text: text})
	return n.engine.Publish(ctx, Message{Kind: MessageChat, Channel: channel, From: uid, Frame: frame})
}

// Publish sends data, valid JSON, in a publish frame to every connection
// that joined channel, on every node.
func (n *Node) Publish(ctx context.Context, channel string, data json.RawMessage) error {
	if !protocol.ValidChannel(channel) {
		return protocol.ErrInvalidChannel
	}
	if !json.Valid(data) {
		return errors.New("presence: Publish: data is not valid JSON")
	}
	frame := protocol.MustEncode(protocol.Publish{Channel: channel, Data: data})
	return n.engine.Publish(ctx, Message{Channel: channel, Frame: frame})
}

// Send sends data, valid JSON, in a message frame to every connection of
// uid, on every node.
func (n *Node) Send(ctx context.Context, uid string, data json.RawMessage) error {
	if !json.Valid(data) {
		return errors.New("presence: Send: data is not valid JSON")
	}
	frame := protocol.MustEncode(protocol.Message{Data: data})
	return n.engine.Publish(ctx, Message{UID: uid, Frame: frame})
}

// DisconnectUser ends every connection of uid, on every node.
func (n *Node) DisconnectUser(ctx context.Context, uid string) error {
	return n.engine.Publish(ctx, Message{Kind: MessageDisconnect, UID: uid})
}
