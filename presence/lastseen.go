package presence

import (
	"time"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/tracker"
)

// DefaultLastSeenTTL is how long a Node keeps when a user went offline.
const DefaultLastSeenTTL = 24 * time.Hour

// seenBook keeps, per user, when it last went offline and when it turned
// invisible: the one place a node keeps them. The view writes it from the
// edges and records it hears, and every reader asks it: watching frames and
// pages through the view's status of a user (See), and Node.Status for what
// the Engine does not keep. An offline user's entry lasts ttl after it went
// (an invisible one's, ttl after the node heard of it), on a ring of the
// Node's clock, so keeping millions costs no timer and dropping them no
// scan; an online user's lasts while it is invisible, or until the view
// lets the user go (letGo).
type seenBook struct {
	ring *tracker.Tracker[string] // the offline users' deadlines; stepped by the Node
	ttl  time.Duration

	mu   lockorder.Mutex[lockorder.LastSeen]
	at   map[string]seenTimes
	peak int
}

// seenTimes is what the book keeps of one user, in Unix milliseconds; zero
// is not known.
type seenTimes struct {
	off int64 // when it went offline, while it is
	hid int64 // when it turned invisible, while it is
}

func (s *seenBook) init(ring *tracker.Tracker[string], ttl time.Duration) {
	s.ring, s.ttl = ring, ttl
	s.at = make(map[string]seenTimes)
}

// offline notes that uid went offline at t, and starts its entry's
// deadline, ttl after t. A zero t (not known) gives an entry the view
// keeps a deadline if it has none.
func (s *seenBook) offline(uid string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.IsZero() {
		s.dueLocked(uid)
		return
	}
	e := s.at[uid]
	e.off = t.UnixMilli()
	s.at[uid] = e
	// Under mu: step's check that the entry was not renewed must see the
	// deadline of every entry it can see.
	s.ring.TouchFor(uid, min(max(s.ttl-time.Since(t), 0), s.ttl))
}

// online notes that uid came online: its last seen no longer counts, and
// its hidden-at only if invisible says it still is.
func (s *seenBook) online(uid string, invisible bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.at[uid]
	if !ok {
		return
	}
	s.ring.Remove(uid)
	e.off = 0
	if !invisible {
		e.hid = 0
	}
	s.putLocked(uid, e)
}

// hide notes that uid is invisible since t (zero: now), unless the book
// has it invisible since earlier: a record delivered as it stands, or a
// change made while invisible, comes with no time or a later one. An
// offline user's entry gets a deadline if it has none.
func (s *seenBook) hide(uid string, t time.Time, online bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.at[uid]
	if e.hid != 0 {
		return
	}
	if t.IsZero() {
		t = time.Now()
	}
	e.hid = t.UnixMilli()
	s.at[uid] = e
	if !online {
		s.dueLocked(uid)
	}
}

// letGo gives uid's entry a deadline if it has none: the view no longer
// hears of uid (it went offline, or left the channels that showed it,
// with no edge of its own), so nothing else would end it.
func (s *seenBook) letGo(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dueLocked(uid)
}

func (s *seenBook) dueLocked(uid string) {
	if _, ok := s.at[uid]; ok && !s.ring.Online(uid) {
		s.ring.TouchFor(uid, s.ttl)
	}
}

// unhide notes that uid is not invisible.
func (s *seenBook) unhide(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.at[uid]; ok && e.hid != 0 {
		e.hid = 0
		s.putLocked(uid, e)
	}
}

// putLocked stores e, or drops it when it holds nothing.
func (s *seenBook) putLocked(uid string, e seenTimes) {
	s.at = shrink.Put(s.at, uid, e, &s.peak)
}

// get returns what the book keeps of uid.
func (s *seenBook) get(uid string) seenTimes {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[uid]
}

// step drops the entries whose time ran out in the ring's step, and
// returns their users.
func (s *seenBook) step() (dropped []string) {
	expired := s.ring.Advance()
	if len(expired) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, uid := range expired {
		if _, ok := s.at[uid]; ok && !s.ring.Online(uid) { // else renewed since
			delete(s.at, uid)
			dropped = append(dropped, uid)
		}
	}
	s.at = shrink.Map(s.at, &s.peak)
	return dropped
}

// lastSeen returns t's last seen, if known.
func (t seenTimes) lastSeen() (time.Time, bool) {
	if t.off == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(t.off), true
}

// hiddenAt returns t's hidden-at, zero if not invisible or not known.
func (t seenTimes) hiddenAt() time.Time {
	if t.hid == 0 {
		return time.Time{}
	}
	return time.UnixMilli(t.hid)
}
