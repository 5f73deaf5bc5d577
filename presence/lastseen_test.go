package presence

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/tracker"
)

// newBook returns a book whose entries last 2 s on a 1 s ring stepped by
// hand.
func newBook(t *testing.T) *seenBook {
	t.Helper()
	ring, err := tracker.New(tracker.Config[string]{Slots: 3, Tick: time.Second})
	require.NoError(t, err)
	t.Cleanup(ring.Close)
	b := new(seenBook)
	b.init(ring, 2*time.Second)
	return b
}

// stepUntilDropped steps b until uid's entry goes, at most limit times,
// and returns the steps it took (limit+1: never).
func stepUntilDropped(b *seenBook, uid string, limit int) int {
	for i := 1; i <= limit; i++ {
		for _, d := range b.step() {
			if d == uid {
				return i
			}
		}
	}
	return limit + 1
}

// The book keeps a user's last seen and hidden-at for the TTL once the
// user is offline, and a hidden-at as long as the user is online and
// invisible, until the view lets it go.
func TestSeenBookLifetimes(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name  string
		do    func(b *seenBook)
		steps int // steps until dropped; 0: kept for 20
		want  seenTimes
	}{
		{"offline", func(b *seenBook) { b.offline("u", now) }, 3, seenTimes{off: now.UnixMilli()}},
		{"offline, time not known", func(b *seenBook) { b.offline("u", time.Time{}) }, 0, seenTimes{}},
		{"offline, then a topic dropped", func(b *seenBook) {
			b.offline("u", now)
			b.step()
			b.offline("u", time.Time{}) // keeps the deadline it has
		}, 2, seenTimes{off: now.UnixMilli()}},
		{"invisible online", func(b *seenBook) { b.hide("u", now, true) }, 0, seenTimes{hid: now.UnixMilli()}},
		{"invisible online, let go", func(b *seenBook) { b.hide("u", now, true); b.letGo("u") }, 3, seenTimes{hid: now.UnixMilli()}},
		{"invisible, heard offline", func(b *seenBook) { b.hide("u", now, false) }, 3, seenTimes{hid: now.UnixMilli()}},
		{"hidden earlier stays", func(b *seenBook) { b.hide("u", now, true); b.hide("u", now.Add(time.Hour), true) }, 0, seenTimes{hid: now.UnixMilli()}},
		{"back online invisible", func(b *seenBook) {
			b.hide("u", now, false)
			b.offline("u", now)
			b.online("u", true)
		}, 0, seenTimes{hid: now.UnixMilli()}},
		{"back online visible", func(b *seenBook) {
			b.hide("u", now, false)
			b.offline("u", now)
			b.online("u", false)
		}, 0, seenTimes{}},
		{"visible again", func(b *seenBook) { b.hide("u", now, true); b.unhide("u") }, 0, seenTimes{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBook(t)
			tc.do(b)
			assert.Equal(t, tc.want, b.get("u"))
			if tc.steps == 0 {
				assert.Equal(t, 21, stepUntilDropped(b, "u", 20), "never dropped")
				assert.Equal(t, tc.want, b.get("u"))
				return
			}
			assert.Equal(t, tc.steps, stepUntilDropped(b, "u", 20))
			assert.Equal(t, seenTimes{}, b.get("u"))
		})
	}
}
