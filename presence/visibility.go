package presence

import (
	"iter"
	"time"

	"github.com/presenced/presenced/protocol"
)

// How one client sees another user is decided here, once: the frames
// (snapshots, diffs, pages, watching and status frames), the keyless
// answers of the HTTP API and the records they carry all ask See. An
// invisible user must look exactly like a user who went offline when it
// turned invisible, and a user seen offline shows no more of its record
// than its info: its mode and note are what it says while there, and a
// note set while invisible would tell that it is.

// See returns st, the truth of uid, as a client of user viewer sees it.
// viewer "" is any client that is not uid, such as a caller of the API
// without the key; uid's own connections see the truth. To the others an
// invisible user is offline, not away, last seen when it turned invisible
// (not known if that is not), and a user seen offline shows only its info.
// HiddenAt is never shown.
func See(viewer, uid string, st UserStatus) UserStatus {
	if viewer == uid && uid != "" {
		return st
	}
	seen := UserStatus{Conns: st.Conns, Away: st.Away, LastSeen: st.LastSeen, Record: st.Record.Public()}
	if st.Record.Mode == protocol.ModeInvisible || !st.HiddenAt.IsZero() {
		// HiddenAt is zero only where no node knows when: saying the real
		// last seen instead would tell when it really left.
		seen.Conns, seen.Away, seen.LastSeen = 0, false, st.HiddenAt
	}
	if seen.Conns > 0 {
		seen.LastSeen = time.Time{}
	} else {
		seen.Record = protocol.Record{Info: st.Record.Info}
	}
	return seen
}

// invisibleMember is a user in a group (online, or a member of a channel)
// that is invisible, as countSeen asks See about it.
var invisibleMember = UserStatus{Conns: 1, Record: protocol.Record{Mode: protocol.ModeInvisible}}

// countSeen is how many of a group (the users online, a channel's members)
// viewer sees, of total, hidden being the invisible ones: See's rule for
// each of those, which shows one to itself alone. It costs O(hidden),
// whatever the group's size.
func countSeen(viewer string, total int, hidden iter.Seq[string]) int {
	for uid := range hidden {
		if See(viewer, uid, invisibleMember).Conns == 0 {
			total--
		}
	}
	return total
}

// statusLocked is the truth of uid as the view and the book know it, for
// See: online counts as one connection, since the view counts users, not
// connections, and so does a membership, whose edge may come before the
// online one. The book knows an invisible user that went offline after
// the view let its record go.
func (v *view) statusLocked(uid string) UserStatus {
	u := v.users[uid]
	t := v.book.get(uid)
	st := UserStatus{Away: u.away, HiddenAt: t.hiddenAt()}
	if u.online || u.member > 0 {
		st.Conns = 1
	} else {
		st.LastSeen, _ = t.lastSeen()
	}
	if r := v.records[uid]; r != nil {
		st.Record = r.rec
	}
	return st
}

// seenLocked is uid as the connections of viewer see it.
func (v *view) seenLocked(viewer, uid string) UserStatus {
	return See(viewer, uid, v.statusLocked(uid))
}
