package main

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// replayState is what the replaying backend knows, from the log alone: who
// is online and who is a member of which channel. It applies each edge as
// it names it (online sets online, leave unsets a membership) and says
// which of the log's order rules an edge breaks.
//
// After a snapshot a user's state is exact at the snapshot's cursor, so
// its next edge must change it; a membership's is not (the channels' pages
// are read after the presence listing, and the log is read on from the
// listing's cursor, so its first edges may repeat what a page already
// holds), so a membership is judged only from its first edge on.
type replayState struct {
	online   map[string]bool
	members  map[string]map[string]bool // uid -> channel -> member
	known    map[string]map[string]bool // uid -> channels whose membership an edge of this segment set
	allKnown bool                       // every membership is known: the segment began on an empty log
}

// newReplayState is the state before any edge: no one online, in no
// channel, and known to be so.
func newReplayState() *replayState {
	return &replayState{online: map[string]bool{}, members: map[string]map[string]bool{},
		known: map[string]map[string]bool{}, allKnown: true}
}

// reset replaces the state with a snapshot's: users online, members of
// each channel (channel -> uids).
func (s *replayState) reset(users []string, members map[string][]string) {
	s.online, s.members, s.known, s.allKnown = map[string]bool{}, map[string]map[string]bool{}, map[string]map[string]bool{}, false
	for _, u := range users {
		s.online[u] = true
	}
	for ch, uids := range members {
		for _, u := range uids {
			s.set(s.members, u, ch, true)
		}
	}
}

func (s *replayState) set(m map[string]map[string]bool, uid, ch string, on bool) {
	if !on {
		delete(m[uid], ch)
		if len(m[uid]) == 0 {
			delete(m, uid)
		}
		return
	}
	if m[uid] == nil {
		m[uid] = map[string]bool{}
	}
	m[uid][ch] = true
}

// isMember says whether the state holds uid in ch, and whether that is
// known in this segment.
func (s *replayState) isMember(uid, ch string) (member, known bool) {
	return s.members[uid][ch], s.allKnown || s.known[uid][ch]
}

// apply applies e and returns the order rules it breaks, each as a kind
// and what happened: a user's edges alternate online and offline, a
// membership's join and leave; a user is online before its joins and
// leaves, and leaves each channel before its offline.
func (s *replayState) apply(e event) (broken [][2]string) {
	bad := func(kind, format string, args ...any) {
		broken = append(broken, [2]string{kind, fmt.Sprintf(format, args...)})
	}
	switch e.Type {
	case "online", "offline":
		on := e.Type == "online"
		if s.online[e.UID] == on {
			bad("repeated "+e.Type, "%s %s with the user already %s", e.Type, e.ID, onOff(on))
		}
		if !on {
			var held []string
			for ch, m := range s.members[e.UID] {
				if _, known := s.isMember(e.UID, ch); m && known {
					held = append(held, ch)
				}
			}
			if len(held) > 0 {
				slices.Sort(held)
				bad("offline before leave", "offline %s while a member of %v by the log", e.ID, held)
			}
		}
		if on {
			s.online[e.UID] = true
		} else {
			delete(s.online, e.UID)
		}
	case "join", "leave":
		on := e.Type == "join"
		if member, known := s.isMember(e.UID, e.Channel); known && member == on {
			bad("repeated "+e.Type, "%s %s with the membership already %s", e.Type, e.ID, onOff(on))
		}
		if !s.online[e.UID] {
			bad(e.Type+" while offline", "%s %s of %s while the user is offline by the log", e.Type, e.ID, e.Channel)
		}
		s.set(s.members, e.UID, e.Channel, on)
		s.set(s.known, e.UID, e.Channel, true)
	}
	return broken
}

// keys is the state as the set of keys on: each online uid, and
// "uid@channel" for each membership, as the checker names them.
func (s *replayState) keys() map[string]bool {
	out := make(map[string]bool, 2*len(s.online))
	for u := range s.online {
		out[u] = true
	}
	for u, chs := range s.members {
		for ch := range chs {
			out[u+"@"+ch] = true
		}
	}
	return out
}

// mark is the replaying backend's state at a moment its reading of the
// log came up to date: the read that found nothing newer was sent at at.
type mark struct {
	at time.Time
	on map[string]bool // keys on, as replayState.keys
}

// diffKeys names the keys want has on and got has not, and the reverse.
func diffKeys(want, got map[string]bool) string {
	return diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)))
}
