package presence

import (
	"slices"
	"time"

	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/tracker"
)

// The view's side of records. A client learns a user's record where the
// user first appears to it (a snapshot, a page, a watching frame, a diff's
// joins, a status frame's online) and then its changes, netted per tick,
// for as long as it sees the user.
//
// An invisible user is, to every other client, offline and a member of
// nothing: a channel keeps it apart from its visible members (hidden), so
// counts, lists, pages and diffs leave it out, and its turning invisible is
// logged as edgeVisibility, which other clients see as a leave (and its
// watchers as offline) and its own connections never see. What it does
// while invisible is logged as edgeHidden, which only its own connections
// see. Its own connections keep seeing themselves: the diffs of a channel
// where a subscriber's user is hidden, or turned visible or invisible in
// the tick, are made for that subscriber alone (see flush.go).

// userRecord is what the view keeps of a user's record: the record and the
// channels of the view the user is a member of, so a change reaches them
// without a scan. When the user turned invisible is the book's (seenBook).
type userRecord struct {
	rec protocol.Record
	in  []string
}

// hiddenLocked reports whether uid is invisible: by its record, or, for a
// user whose record the view let go (it was offline and a member of
// nothing), by the book.
func (v *view) hiddenLocked(uid string) bool {
	if r := v.records[uid]; r != nil {
		return r.rec.Mode == protocol.ModeInvisible
	}
	return v.book.get(uid).hid != 0
}

// visibleLocked reports whether other clients see uid online.
func (v *view) visibleLocked(uid string) bool {
	return v.users[uid].online && v.seenLocked("", uid).Conns > 0
}

// countMemberLocked counts uid in or out of channel, and keeps its
// record's channels.
func (v *view) countMemberLocked(uid, channel string, joined bool) {
	u := v.users[uid]
	r := v.records[uid]
	if joined {
		u.member++
		if r != nil {
			r.in = append(r.in, channel)
		}
	} else {
		u.member--
		if r != nil {
			r.in = slices.DeleteFunc(r.in, func(ch string) bool { return ch == channel })
		}
	}
	v.putUser(uid, u)
	if !joined && !u.online {
		v.forgetRecordLocked(uid)
	}
}

// channelsOfLocked lists the channels uid is a member of: a scan, made
// once when a member gains its first record.
func (v *view) channelsOfLocked(uid string) []string {
	var in []string
	for name, cv := range v.channels {
		if cv.has(uid) {
			in = append(in, name)
		}
	}
	return in
}

// forgetRecordLocked drops uid's record once nobody here sees uid: it is
// offline and a member of nothing. The book keeps when an invisible one
// turned invisible, for its last seen as others know it.
func (v *view) forgetRecordLocked(uid string) {
	r := v.records[uid]
	if r == nil || len(r.in) > 0 || v.users[uid].online {
		return
	}
	v.dropRecordLocked(uid)
	v.book.letGo(uid)
}

func (v *view) dropRecordLocked(uid string) {
	delete(v.records, uid)
	v.records = shrink.Map(v.records, &v.recordsPeak)
}

// recordChanged records uid's new record: an edgeRecord where it is
// visible or its own connections are, and, if it turned invisible or
// visible, the edges the other clients see of that.
func (v *view) recordChanged(uid string, rec protocol.Record, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.notes.setLocked(uid, rec.Note)
	wasHidden, isHidden := v.hiddenLocked(uid), rec.Mode == protocol.ModeInvisible
	r := v.records[uid]
	if r == nil {
		if rec.IsZero() && !wasHidden {
			return
		}
		r = &userRecord{}
		if v.users[uid].member > 0 {
			r.in = v.channelsOfLocked(uid)
		}
		v.records[uid] = r
	}
	old := r.rec
	r.rec = rec
	if isHidden {
		u := v.users[uid]
		v.book.hide(uid, at, u.online || u.member > 0)
	} else {
		v.book.unhide(uid)
	}
	if wasHidden != isHidden {
		v.turnLocked(uid, r, !isHidden, at)
	}
	if !old.Equal(rec) {
		was := &old
		if old.IsZero() {
			was = nil
		}
		for _, ch := range r.in {
			if cv := v.channels[ch]; cv != nil {
				v.logLocked(cv, edge{uid: uid, kind: edgeRecord, was: was})
			}
		}
		if len(v.watchers[uid]) > 0 && v.users[uid].online {
			v.userLog = append(v.userLog, edge{uid: uid, kind: edgeRecord, was: was})
		}
	}
	switch {
	case rec.IsZero():
		v.dropRecordLocked(uid)
	case !at.IsZero() && !isHidden:
		// A change of a user nobody here sees (a note that ran out while
		// it was offline) is not kept; a record delivered as it stands, with
		// no time, comes before the user's online edge or snapshot. An
		// invisible user's comes with its hidden-at, also before those: it
		// is kept until the book lets the user go (forgetExpired).
		v.forgetRecordLocked(uid)
	}
}

// forgetExpired drops the records of those of uids, whose entries the
// book just dropped, that nobody here sees.
func (v *view) forgetExpired(uids []string) {
	if len(uids) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, uid := range uids {
		v.forgetRecordLocked(uid)
	}
}

// turnLocked moves uid, a user who turned visible or invisible, between
// its channels' visible and hidden members, and tells its watchers.
func (v *view) turnLocked(uid string, r *userRecord, visible bool, at time.Time) {
	for _, ch := range r.in {
		cv := v.channels[ch]
		if cv == nil {
			continue
		}
		if visible {
			cv.unhide(uid)
			cv.members.Add(uid)
		} else {
			cv.members.Remove(uid)
			cv.hide(uid)
			v.stopTypingLocked(cv, uid) // as a leave would
		}
		v.logLocked(cv, edge{uid: uid, on: visible, kind: edgeVisibility})
	}
	if u := v.users[uid]; u.online {
		v.logUserOnlineLocked(uid, visible, !visible && u.away, at)
	}
}

// lastSeenLocked returns when other clients saw uid go offline: when it
// turned invisible, if it is.
func (v *view) lastSeenLocked(uid string) (int64, bool) {
	if at := v.seenLocked("", uid).LastSeen; !at.IsZero() {
		return at.UnixMilli(), true
	}
	return 0, false
}

// recordLocked returns uid's record as the connections of own see it.
func (v *view) recordLocked(uid, own string) protocol.Record {
	if v.records[uid] == nil {
		return protocol.Record{}
	}
	return v.seenLocked(own, uid).Record
}

// usersLocked returns the records of those of uids that have one, as the
// connections of own see them; nil if none has.
func (v *view) usersLocked(uids []string, own string) map[string]protocol.Record {
	var out map[string]protocol.Record
	for _, uid := range uids {
		if _, ok := v.records[uid]; !ok {
			continue
		}
		if rec := v.recordLocked(uid, own); !rec.IsZero() {
			if out == nil {
				out = make(map[string]protocol.Record)
			}
			out[uid] = rec
		}
	}
	return out
}

// withOwn puts uid into members, a sorted first page of at most max,
// unless it would fall past a full page that more members follow.
func withOwn(members []string, uid string, max int, more bool) []string {
	i, _ := slices.BinarySearch(members, uid)
	if i == len(members) && (more || len(members) >= max) {
		return members
	}
	members = slices.Insert(slices.Clone(members), i, uid)
	if len(members) > max {
		members = members[:max]
	}
	return members
}

// noteClock times the notes that run out: each user with such a note has
// a deadline on a ring of the Node's clock, a tick early, and is due at the
// first step at or past its until.
type noteClock struct {
	ring  *tracker.Tracker[string] // stepped by the Node
	tick  time.Duration
	until map[string]int64 // under the view's mu
	peak  int
}

func (nc *noteClock) init(ring *tracker.Tracker[string], tick time.Duration) {
	nc.ring, nc.tick = ring, tick
	nc.until = make(map[string]int64)
}

// setLocked times uid's note, or stops timing it.
func (nc *noteClock) setLocked(uid string, note *protocol.Note) {
	if note == nil || note.Until == 0 {
		if _, ok := nc.until[uid]; ok {
			delete(nc.until, uid)
			nc.until = shrink.Map(nc.until, &nc.peak)
			nc.ring.Remove(uid)
		}
		return
	}
	nc.until[uid] = note.Until
	// A tick early: the step that finds it early puts it on the next one,
	// so it clears at the first step at or past until, within a tick.
	nc.ring.TouchFor(uid, time.Until(time.UnixMilli(note.Until))-nc.tick)
}

// dueNote is a note whose until passed.
type dueNote struct {
	uid   string
	until int64
}

// due steps the ring and returns the notes whose until passed by now.
func (v *view) dueNotes(now time.Time) []dueNote {
	nc := &v.notes
	expired := nc.ring.Advance()
	if len(expired) == 0 {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []dueNote
	for _, uid := range expired {
		until, ok := nc.until[uid]
		if !ok || nc.ring.Online(uid) {
			continue // cleared, or timed again since
		}
		if until > now.UnixMilli() {
			nc.ring.TouchFor(uid, 0)
			continue
		}
		delete(nc.until, uid)
		out = append(out, dueNote{uid, until})
	}
	nc.until = shrink.Map(nc.until, &nc.peak)
	return out
}
