package presence

import (
	"time"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/tracker"
)

// DefaultLastSeenTTL is how long a Node keeps when a user went offline.
const DefaultLastSeenTTL = 24 * time.Hour

// lastSeen records when users went offline, for the offline edges this node
// produced (every edge, with the in-memory engine). Each record lasts ttl
// on a ring of the Node's clock, so keeping millions costs no timer and
// dropping them no scan.
type lastSeen struct {
	ring *tracker.Tracker[string] // the records' deadlines; stepped by the Node
	ttl  time.Duration

	mu   lockorder.Mutex[lockorder.LastSeen]
	at   map[string]int64 // uid -> Unix milliseconds
	peak int
}

func (s *lastSeen) init(ring *tracker.Tracker[string], ttl time.Duration) {
	s.ring, s.ttl = ring, ttl
	s.at = make(map[string]int64)
}

// record notes that uid went offline at t; an online edge leaves the
// record, which is read only while the user is offline.
func (s *lastSeen) record(uid string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[uid] = t.UnixMilli()
	// Under mu: step's check that the record was not renewed must see the
	// deadline of every record it can see.
	s.ring.TouchFor(uid, s.ttl)
}

// get returns when uid last went offline, if that is recorded.
func (s *lastSeen) get(uid string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, ok := s.at[uid]
	return ms, ok
}

// step drops the records whose time ran out in the ring's step, and
// returns their users.
func (s *lastSeen) step() (dropped []string) {
	expired := s.ring.Advance()
	if len(expired) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, uid := range expired {
		if !s.ring.Online(uid) { // else recorded again since
			delete(s.at, uid)
			dropped = append(dropped, uid)
		}
	}
	s.at = shrink.Map(s.at, &s.peak)
	return dropped
}
