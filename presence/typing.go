package presence

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"time"

	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/tracker"
)

// DefaultTypingTTL is how long a user stays typing in a channel after its
// last typing frame there.
const DefaultTypingTTL = 5 * time.Second

// Typing says that c's user is typing in channel, which c must have joined
// (else ErrNotJoined): every node that follows channel counts the user
// typing there until Config.TypingTTL after its last Typing, or until it
// chats there, leaves or goes offline, and tells the channel's members at
// its next tick. It makes c active. It is never a presence edge.
func (n *Node) Typing(ctx context.Context, c Client, channel string) error {
	uid, err := n.activeMember(c, channel)
	if err != nil {
		return err
	}
	return n.engine.Publish(ctx, Message{Kind: MessageTyping, Channel: channel, From: uid})
}

// typingKey is one user typing in one channel, on the typing ring.
type typingKey struct{ channel, uid string }

// typists is who types where, as the view learns it from typing messages:
// each (channel, user) has a deadline on a ring of the Node's clock, so
// expiry costs no timer and no scan, and a channel keeps a typingSet only
// while someone types there or its members were last told someone did.
type typists struct {
	ring *tracker.Tracker[typingKey] // stepped by the Node
	ttl  time.Duration
	// dirty holds the channels whose typing set changed this tick; under
	// the view's mu.
	dirty []*channelView
}

// typingSet is a channel's typing users and what its members were told.
type typingSet struct {
	users map[string]struct{}
	told  []string // the users listed in the last frame sent
	count int      // its count
	dirty bool     // in typists.dirty
	// snapped holds the frames sent this tick with joined snapshots, so
	// that the tick's frame does not repeat one to its subscriber.
	snapped map[Client]protocol.Encoded
}

func (t *typists) init(ring *tracker.Tracker[typingKey], ttl time.Duration) {
	t.ring, t.ttl = ring, ttl
}

// typingLocked marks uid typing in channel for another TTL. A channel this
// node does not follow has nobody here to tell. The sending node checked
// that uid is a member; this one does not, since the join may reach it
// after the typing message.
func (v *view) typingLocked(channel, uid string) {
	cv := v.channels[channel]
	if cv == nil {
		return
	}
	// Under mu: stepTyping's check that a deadline was not renewed must see
	// every renewal made before the user counts as typing.
	v.typing.ring.TouchFor(typingKey{channel, uid}, v.typing.ttl)
	ts := cv.typing
	if ts == nil {
		ts = &typingSet{}
		cv.typing = ts
	}
	if ts.users == nil {
		ts.users = make(map[string]struct{})
	}
	if _, ok := ts.users[uid]; ok {
		return
	}
	ts.users[uid] = struct{}{}
	v.typingChangedLocked(cv)
}

// stopTypingLocked ends uid's typing in cv, if it types there: it chatted,
// left, or its time ran out.
func (v *view) stopTypingLocked(cv *channelView, uid string) {
	ts := cv.typing
	if ts == nil {
		return
	}
	if _, ok := ts.users[uid]; !ok {
		return
	}
	delete(ts.users, uid)
	v.typing.ring.Remove(typingKey{cv.name, uid})
	v.typingChangedLocked(cv)
}

func (v *view) typingChangedLocked(cv *channelView) {
	if !cv.typing.dirty {
		cv.typing.dirty = true
		v.typing.dirty = append(v.typing.dirty, cv)
	}
}

// stepTyping steps the typing ring and ends the typing that ran out in the
// step; one renewed since is not due yet.
func (v *view) stepTyping() {
	expired := v.typing.ring.Advance()
	if len(expired) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, k := range expired {
		if v.typing.ring.Online(k) {
			continue
		}
		if cv := v.channels[k.channel]; cv != nil {
			v.stopTypingLocked(cv, k.uid)
		}
	}
}

// flushTypingLocked sends each channel whose typing set changed this tick
// one frame for all its subscribers, if what they would be told changed:
// O(subscribers) per changed channel per tick, however many typing
// messages came.
func (v *view) flushTypingLocked() {
	for _, cv := range v.typing.dirty {
		ts := cv.typing
		ts.dirty = false
		if v.channels[cv.name] != cv {
			continue // dropped since, with its typing
		}
		users, count := typingList(ts.users)
		if count != ts.count || !slices.Equal(users, ts.told) {
			f := protocol.MustEncode(protocol.TypingUsers{Channel: cv.name, Users: users, Count: count})
			for c := range cv.subs {
				if snap, ok := ts.snapped[c]; !ok || !bytes.Equal(snap.Data, f.Data) {
					c.Send(f)
				}
			}
			ts.told, ts.count = users, count
		}
		ts.snapped = nil
		if len(ts.users) == 0 {
			cv.typing = nil // its members were told nobody types
		}
	}
	v.typing.dirty = reuse(v.typing.dirty)
}

// typingList returns the first MaxTypingListed of users, sorted, and their
// number when that is more (else 0), as a typing frame carries them.
func typingList(users map[string]struct{}) ([]string, int) {
	list := slices.Sorted(maps.Keys(users))
	if len(list) <= protocol.MaxTypingListed {
		return list, 0
	}
	return slices.Clone(list[:protocol.MaxTypingListed]), len(list)
}

// typingSnapshotLocked sends c, which just got cv's joined snapshot, who
// types in cv now, if anyone does.
func (v *view) typingSnapshotLocked(c Client, cv *channelView) {
	if cv.typing == nil || len(cv.typing.users) == 0 {
		return
	}
	ts := cv.typing
	users, count := typingList(ts.users)
	f := protocol.MustEncode(protocol.TypingUsers{Channel: cv.name, Users: users, Count: count})
	c.Send(f)
	if ts.snapped == nil {
		ts.snapped = make(map[Client]protocol.Encoded)
	}
	ts.snapped[c] = f
	v.typingChangedLocked(cv) // for the tick to forget snapped
}
