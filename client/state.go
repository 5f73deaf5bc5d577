package client

import (
	"maps"
	"slices"
	"time"

	"github.com/presenced/presenced/protocol"
)

// ChannelState is what the Client knows of a joined channel: the last
// snapshot with every diff, page and typing frame since applied.
type ChannelState struct {
	// Count is the channel's member count, exact as of the last frame.
	Count int
	// Members are the members the Client holds, sorted: every member when
	// Complete, else those of the snapshot (cut at the server's member
	// list) and of the pages loaded, kept current by the diffs.
	Members []string
	// Away are those of Members who are away, sorted.
	Away []string
	// Typing are the users typing in the channel now, sorted, at most
	// protocol.MaxTypingListed of them.
	Typing []string
	// TypingCount is how many users type there in all when the server
	// names only some of them (more than protocol.MaxTypingListed); 0 when
	// Typing names them all.
	TypingCount int
	// Complete is true while Members holds every member: after a full
	// snapshot or LoadMembers, until a count-only diff of a big channel
	// makes the list stale.
	Complete bool
}

// User states.
const (
	Active  = "active"  // online, with at least one active connection
	Away    = "away"    // online, every connection away
	Offline = "offline" // no live connection
)

// UserState is what the Client knows of a watched user.
type UserState struct {
	// State is Active, Away or Offline; "" for a user not watched.
	State string
	// LastSeen is when the user went offline, if the Client heard of it
	// (from a status frame, or the server's answer to the watch); zero
	// otherwise.
	LastSeen time.Time
}

type set = map[string]struct{}

func setOf(ids []string) set {
	s := make(set, len(ids))
	for _, id := range ids {
		s[id] = struct{}{}
	}
	return s
}

func sorted(s set) []string { return slices.Sorted(maps.Keys(s)) }

// chanState is a channel's state; the Client's mutex guards it.
type chanState struct {
	gen         uint64 // the connection whose snapshot it holds
	count       int
	members     set
	away        set
	typing      []string
	typingCount int
	// stale is set by a count-only diff: members may hold users who left.
	stale bool
	// countOnly counts the count-only diffs, so LoadMembers can tell a pass
	// none interrupted.
	countOnly uint64
}

func newChanState() *chanState { return &chanState{members: set{}, away: set{}} }

// snapshot replaces everything with a joined frame of connection gen.
func (s *chanState) snapshot(f *protocol.Joined, gen uint64) {
	*s = chanState{gen: gen, count: f.Count, members: setOf(f.Members), away: setOf(f.Away), countOnly: s.countOnly}
}

// diff applies a presence diff: the lists when it has them, else the
// count alone, which makes the list stale.
func (s *chanState) diff(f *protocol.Presence) {
	s.count = f.Count
	if f.CountOnly {
		s.stale = true
		s.countOnly++
		return
	}
	for _, id := range f.Joins {
		s.members[id] = struct{}{}
	}
	for _, id := range f.Leaves {
		delete(s.members, id)
		delete(s.away, id)
	}
	for _, id := range f.Away {
		if _, ok := s.members[id]; ok {
			s.away[id] = struct{}{}
		}
	}
	for _, id := range f.Active {
		delete(s.away, id)
	}
}

// page applies a page of members asked for after after: it replaces what
// is held after after, up to and including the page's Next (to the end on
// the last page), with the page's members. It returns those it held
// there.
func (s *chanState) page(f *protocol.MembersPage, after string) (was []string) {
	s.count = f.Count
	inRange := func(id string) bool { return id > after && (f.Next == "" || id <= f.Next) }
	for id := range s.members {
		if inRange(id) {
			was = append(was, id)
			delete(s.members, id)
		}
	}
	for id := range s.away {
		if inRange(id) {
			delete(s.away, id)
		}
	}
	for _, id := range f.Members {
		s.members[id] = struct{}{}
	}
	for _, id := range f.Away {
		s.away[id] = struct{}{}
	}
	return was
}

// typingUsers replaces who is typing.
func (s *chanState) typingUsers(f *protocol.TypingUsers) {
	s.typing = slices.Clone(f.Users)
	s.typingCount = 0
	if f.Count > len(f.Users) {
		s.typingCount = f.Count
	}
}

// complete reports whether members holds every member. The members held
// are always members (a snapshot, pages and diffs never add anyone else)
// unless a count-only diff made them stale, so holding Count of them is
// holding them all.
func (s *chanState) complete() bool { return !s.stale && len(s.members) == s.count }

func (s *chanState) export() ChannelState {
	var typing []string // nil when nobody types, as Members and Away are when empty
	if len(s.typing) > 0 {
		typing = slices.Clone(s.typing)
	}
	return ChannelState{
		Count:       s.count,
		Members:     sorted(s.members),
		Away:        sorted(s.away),
		Typing:      typing,
		TypingCount: s.typingCount,
		Complete:    s.complete(),
	}
}

// watching rebuilds the watched users' state from a watching frame: uids
// is the watch list it answers. A user offline has the last seen the frame
// gives, else keeps the one the Client knew.
func watching(users map[string]UserState, uids []string, f *protocol.Watching) map[string]UserState {
	online, away := setOf(f.Online), setOf(f.Away)
	out := make(map[string]UserState, len(uids))
	for _, uid := range uids {
		var st UserState
		switch _, on := online[uid]; {
		case !on:
			st = UserState{State: Offline}
			if ms := f.LastSeen[uid]; ms > 0 {
				st.LastSeen = time.UnixMilli(ms)
			} else if old := users[uid]; old.State == Offline {
				st.LastSeen = old.LastSeen
			}
		default:
			st.State = Active
			if _, a := away[uid]; a {
				st.State = Away
			}
		}
		out[uid] = st
	}
	return out
}

// status applies a status frame to the watched users.
func status(users map[string]UserState, f *protocol.Status) {
	set := func(uid string, st UserState) {
		if _, watched := users[uid]; watched {
			users[uid] = st
		}
	}
	for _, uid := range f.Online {
		set(uid, UserState{State: Active})
	}
	for _, uid := range f.Offline {
		st := UserState{State: Offline}
		if ms, ok := f.LastSeen[uid]; ok {
			st.LastSeen = time.UnixMilli(ms)
		}
		set(uid, st)
	}
	for _, uid := range f.Away {
		set(uid, UserState{State: Away})
	}
	for _, uid := range f.Active {
		set(uid, UserState{State: Active})
	}
}
