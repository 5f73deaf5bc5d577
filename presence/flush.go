package presence

import (
	"slices"

	"github.com/presenced/presenced/protocol"
)

// The view's output: once per tick, flush nets each log and sends each
// client what changed for it.

// flush sends the tick's netted changes: per channel at most one diff to
// each subscriber, and per client at most one status frame.
func (v *view) flush() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, cv := range v.dirty {
		v.flushChannel(cv)
	}
	v.dirty = reuse(v.dirty)
	v.flushTypingLocked()
	if len(v.userLog) > 0 {
		v.flushStatus()
	}
	for _, ws := range v.rebased {
		ws.base = 0
	}
	v.rebased = reuse(v.rebased)
	v.userLog = reuse(v.userLog)
	v.offAt = nil
	v.notify.endTick()
}

// keepLog is the most entries a per-tick list keeps room for between ticks.
const keepLog = 64

// reuse empties a per-tick list for the next tick. A list that once held a
// burst (every member of a big channel joining at once) is let go rather
// than kept at its peak for as long as its channel lives; a busy one grows
// again within the tick, as it would anyway.
func reuse[S ~[]E, E any](s S) S {
	if cap(s) > keepLog {
		return nil
	}
	clear(s)
	return s[:0]
}

func (v *view) flushChannel(cv *channelView) {
	count := cv.members.Len()
	lists := count <= v.presenceLists
	frames := make(map[int]*protocol.Encoded) // by base with lists, by count seen without
	for c, s := range cv.subs {
		key := int(s.seen)
		if lists {
			key = int(s.base)
		}
		frame, ok := frames[key]
		if !ok {
			frame = v.diff(cv, s, count, lists)
			frames[key] = frame
		}
		if frame != nil {
			c.Send(*frame)
		}
		cv.subs[c] = sub{base: 0, seen: int32(count)}
	}
	cv.log = reuse(cv.log)
	v.dropIfUnused(cv)
}

// diff is the frame for a subscriber at s, encoded once for every
// subscriber at the same place; nil if it has nothing to learn.
func (v *view) diff(cv *channelView, s sub, count int, lists bool) *protocol.Encoded {
	if !lists {
		if int(s.seen) == count {
			return nil
		}
		f := protocol.MustEncode(protocol.Presence{Channel: cv.name, Count: count, CountOnly: true})
		return &f
	}
	log := cv.log[min(int(s.base), len(cv.log)):]
	joins, leaves := netEdges(log, cv.members.Has)
	away, active := netActivity(log, joins, cv.members.Has, cv.isAway)
	if len(joins) == 0 && len(leaves) == 0 && len(away) == 0 && len(active) == 0 {
		return nil
	}
	f := protocol.MustEncode(protocol.Presence{Channel: cv.name, Count: count, Joins: joins, Leaves: leaves, Away: away, Active: active})
	return &f
}

// netEdges nets log: a user whose first edge in it is a join was out before
// it, one whose first edge is a leave was in; now says where it is after.
// It returns those who came in and those who went out, each sorted.
func netEdges(log []edge, now func(uid string) bool) (in, out []string) {
	seen := make(map[string]struct{}, len(log))
	for _, e := range log {
		if e.act {
			continue
		}
		if _, dup := seen[e.uid]; dup {
			continue
		}
		seen[e.uid] = struct{}{}
		was := !e.on
		switch is := now(e.uid); {
		case is && !was:
			in = append(in, e.uid)
		case !is && was:
			out = append(out, e.uid)
		}
	}
	slices.Sort(in)
	slices.Sort(out)
	return in, out
}

// netActivity nets log's activity edges, as netEdges does its presence
// edges, for those who are in now (in: is): see firstActivity. It returns
// those who turned away and those back from away, each sorted. A user who
// came in (in came, sorted) away is among the away: it is new to whoever
// applies the log.
func netActivity(log []edge, came []string, in, away func(uid string) bool) (turned, back []string) {
	was := firstActivity(log)
	for uid, wasAway := range was {
		if !in(uid) {
			continue
		}
		_, fresh := slices.BinarySearch(came, uid)
		switch isAway := away(uid); {
		case isAway && (fresh || !wasAway):
			turned = append(turned, uid)
		case !isAway && wasAway && !fresh:
			back = append(back, uid)
		}
	}
	for _, uid := range came {
		if _, logged := was[uid]; !logged && away(uid) {
			turned = append(turned, uid)
		}
	}
	slices.Sort(turned)
	slices.Sort(back)
	return turned, back
}

// firstActivity says, for each user with an activity edge in log, whether
// it was away before the log: its first activity edge is away if it was
// active, active if it was away. nil: no activity edge.
func firstActivity(log []edge) map[string]bool {
	var was map[string]bool
	for _, e := range log {
		if !e.act {
			continue
		}
		if was == nil {
			was = make(map[string]bool)
		}
		if _, dup := was[e.uid]; !dup {
			was[e.uid] = !e.on
		}
	}
	return was
}

func (v *view) flushStatus() {
	isOnline := func(uid string) bool { return v.users[uid].online }
	isAway := func(uid string) bool { return v.users[uid].away }
	type status struct {
		online, offline, away, active []string
		lastSeen                      map[string]int64
	}
	out := make(map[Client]*status)
	get := func(c Client) *status {
		st := out[c]
		if st == nil {
			st = &status{online: []string{}, offline: []string{}}
			out[c] = st
		}
		return st
	}
	// add puts uid in c's status frame, in the list of changes[kind].
	add := func(c Client, uid string, kind int) {
		st := get(c)
		switch kind {
		case 0:
			st.online = append(st.online, uid)
		case 1:
			st.offline = append(st.offline, uid)
			if at, ok := v.offAt[uid]; ok {
				if st.lastSeen == nil {
					st.lastSeen = make(map[string]int64)
				}
				st.lastSeen[uid] = at
			}
		case 2:
			st.away = append(st.away, uid)
		default:
			st.active = append(st.active, uid)
		}
	}
	// changes nets log: who came online, went offline, turned away, came back.
	changes := func(log []edge) [4][]string {
		on, off := netEdges(log, isOnline)
		turned, back := netActivity(log, on, isOnline, isAway)
		return [4][]string{on, off, turned, back}
	}
	for kind, uids := range changes(v.userLog) {
		for _, uid := range uids {
			for c := range v.watchers[uid] {
				if v.watching[c].base == 0 {
					add(c, uid, kind)
				}
			}
		}
	}
	// Watching since mid-tick: only what followed the watching frame counts.
	for _, ws := range v.rebased {
		if v.watching[ws.c] != ws {
			continue // replaced, or the client is gone
		}
		for kind, uids := range changes(v.userLog[ws.base:]) {
			for _, uid := range uids {
				if _, ok := slices.BinarySearch(ws.uids, uid); ok {
					add(ws.c, uid, kind)
				}
			}
		}
	}
	for c, st := range out {
		c.Send(protocol.MustEncode(protocol.Status{Online: st.online, Offline: st.offline, Away: st.away, Active: st.active, LastSeen: st.lastSeen}))
	}
}
