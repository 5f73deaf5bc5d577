package presence

import (
	"maps"
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
	total := cv.members.Len() + len(cv.hidden)
	count := countSeen("", total, maps.Keys(cv.hidden))
	lists := count <= v.presenceLists
	own := v.ownSubsLocked(cv)
	frames := make(map[int]*protocol.Encoded) // by base with lists, by count seen without
	for c, s := range cv.subs {
		if uid, ok := own[c]; ok {
			ownCount := countSeen(uid, total, maps.Keys(cv.hidden))
			if frame := v.diffFor(cv, s, uid, ownCount, lists); frame != nil {
				c.Send(*frame)
			}
			cv.subs[c] = sub{base: 0, seen: int32(ownCount)}
			continue
		}
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
	return v.diffFor(cv, s, "", count, lists)
}

// diffFor is diff for the subscribers of user own ("": any other), who
// see own as a member while it is one, visible or not, and count it.
func (v *view) diffFor(cv *channelView, s sub, own string, count int, lists bool) *protocol.Encoded {
	if !lists {
		if int(s.seen) == count {
			return nil
		}
		f := protocol.MustEncode(protocol.Presence{Channel: cv.name, Count: count, CountOnly: true})
		return &f
	}
	in := cv.members.Has
	if own != "" && cv.isHidden(own) {
		in = func(uid string) bool { return uid == own || cv.members.Has(uid) }
	}
	log := cv.log[min(int(s.base), len(cv.log)):]
	joins, leaves := netEdges(log, in, own)
	away, active := netActivity(log, joins, in, cv.isAway)
	updated := v.updatedLocked(log, joins, in, own)
	if len(joins) == 0 && len(leaves) == 0 && len(away) == 0 && len(active) == 0 && len(updated) == 0 {
		return nil
	}
	f := protocol.MustEncode(protocol.Presence{Channel: cv.name, Count: count, Joins: joins, Leaves: leaves, Away: away, Active: active,
		Users: v.usersLocked(joins, own), Updated: updated})
	return &f
}

// ownSubsLocked returns the subscribers of cv that need diffs of their
// own, with their users: those whose user is hidden in cv, or turned
// visible or invisible there in the tick.
func (v *view) ownSubsLocked(cv *channelView) map[Client]string {
	var own map[Client]string
	add := func(uid string) {
		for _, c := range v.clientsLocked(uid) {
			if _, ok := cv.subs[c]; ok {
				if own == nil {
					own = make(map[Client]string)
				}
				own[c] = uid
			}
		}
	}
	for uid := range cv.hidden {
		add(uid)
	}
	for _, e := range cv.log {
		if e.kind == edgeVisibility || e.kind == edgeHidden {
			add(e.uid)
		}
	}
	return own
}

// clientsLocked returns uid's clients here.
func (v *view) clientsLocked(uid string) []Client {
	c := v.users[uid].c
	if c == nil {
		return nil
	}
	return append([]Client{c}, v.others[uid]...)
}

// updatedLocked returns the new records of the users with an edgeRecord in
// log who are in (in) now and were before it (not among came, sorted),
// and whose record, as own's connections see it, is not what it was.
func (v *view) updatedLocked(log []edge, came []string, in func(uid string) bool, own string) map[string]protocol.Record {
	var first map[string]*protocol.Record
	for _, e := range log {
		if e.kind != edgeRecord {
			continue
		}
		if first == nil {
			first = make(map[string]*protocol.Record)
		}
		if _, dup := first[e.uid]; !dup {
			first[e.uid] = e.was
		}
	}
	var out map[string]protocol.Record
	for uid, was := range first {
		if !in(uid) {
			continue
		}
		if _, fresh := slices.BinarySearch(came, uid); fresh {
			continue // its joins entry carries it
		}
		var before protocol.Record
		if was != nil {
			before = *was
		}
		// As it was shown: a user a change is news of was there before it.
		before = See(own, uid, UserStatus{Conns: 1, Record: before}).Record
		if rec := v.recordLocked(uid, own); !rec.Equal(before) {
			if out == nil {
				out = make(map[string]protocol.Record)
			}
			out[uid] = rec
		}
	}
	return out
}

// netEdges nets log: a user whose first edge in it is a join was out before
// it, one whose first edge is a leave was in; now says where it is after.
// It returns those who came in and those who went out, each sorted. The
// connections of own (or "") see its own edgeHidden and not its
// edgeVisibility; the others see the reverse.
func netEdges(log []edge, now func(uid string) bool, own string) (in, out []string) {
	seen := make(map[string]struct{}, len(log))
	for _, e := range log {
		switch e.kind {
		case edgeActivity, edgeRecord:
			continue
		case edgeVisibility:
			if e.uid == own {
				continue
			}
		case edgeHidden:
			if e.uid != own {
				continue
			}
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
		if e.kind != edgeActivity {
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
	isOnline := v.visibleLocked
	isAway := func(uid string) bool { return v.users[uid].away }
	type status struct {
		online, offline, away, active []string
		users, updated                map[string]protocol.Record
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
			if rec := v.recordLocked(uid, ""); !rec.IsZero() {
				if st.users == nil {
					st.users = make(map[string]protocol.Record)
				}
				st.users[uid] = rec
			}
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
		case 3:
			st.active = append(st.active, uid)
		default:
			if st.updated == nil {
				st.updated = make(map[string]protocol.Record)
			}
			st.updated[uid] = v.recordLocked(uid, "")
		}
	}
	// changes nets log: who came online, went offline, turned away, came
	// back, and whose record changed.
	changes := func(log []edge) [5][]string {
		on, off := netEdges(log, isOnline, "")
		turned, back := netActivity(log, on, isOnline, isAway)
		var updated []string
		for uid := range v.updatedLocked(log, on, isOnline, "") {
			updated = append(updated, uid)
		}
		return [5][]string{on, off, turned, back, updated}
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
		c.Send(protocol.MustEncode(protocol.Status{Online: st.online, Offline: st.offline, Away: st.away, Active: st.active,
			Users: st.users, Updated: st.updated, LastSeen: st.lastSeen}))
	}
}
