package client_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// TestRecordsFollowChurn: while members of a channel and watched users
// come and go, change their records and turn invisible and back, and the
// Client is cut off twice, the Client ends holding the records of exactly
// the users it sees (the visible members, the visible watched users and
// itself), each as the server has it.
func TestRecordsFollowChurn(t *testing.T) {
	s := startServer(t, realClock())
	var d dialer
	opts := fast("watcher", "room")
	opts.Dialer = d.websocket()
	c := dial(t, s, opts)
	var watched []string
	for i := range 5 {
		watched = append(watched, fmt.Sprintf("w%d", i))
	}
	require.NoError(t, c.Watch(ctxLong(t), watched))

	rng := rand.New(rand.NewPCG(7, 11))
	conns := map[string]*member{}         // the users connected now
	records := map[string]client.Record{} // each user's record as the server keeps it
	modes := []string{protocol.ModeOnline, protocol.ModeDND, protocol.ModeInvisible}
	for i := range 800 {
		var uid string
		if rng.IntN(4) == 0 {
			uid = watched[rng.IntN(len(watched))]
		} else {
			uid = fmt.Sprintf("u%02d", rng.IntN(25))
		}
		switch m := conns[uid]; {
		case m == nil:
			var channels []string
			if strings.HasPrefix(uid, "u") {
				channels = []string{"room"}
			}
			conns[uid] = s.connect(t, uid, channels...)
		case rng.IntN(4) == 0:
			s.disconnect(m)
			delete(conns, uid)
		default:
			mode := modes[rng.IntN(len(modes))]
			if mode == protocol.ModeInvisible && rng.IntN(2) == 0 {
				mode = protocol.ModeOnline // invisible less often
			}
			var note *protocol.Note
			if rng.IntN(2) == 0 {
				note = &protocol.Note{Text: fmt.Sprintf("note %d", i)}
			}
			require.NoError(t, s.node.Set(m, protocol.Set{Mode: mode, Note: note, NoteSet: true}))
			r := client.Record{Mode: mode, Note: note}
			if mode == protocol.ModeOnline {
				r.Mode = ""
			}
			records[uid] = r
		}
		if i == 250 || i == 550 {
			d.cut()
		}
		if i%20 == 0 {
			time.Sleep(5 * time.Millisecond) // spread over ticks
		}
	}

	visible := func(uid string) bool { return conns[uid] != nil && records[uid].Mode != protocol.ModeInvisible }
	want := []string{"watcher"}
	for uid := range conns {
		if visible(uid) {
			want = append(want, uid)
		}
	}
	slices.Sort(want)
	var mu sync.Mutex
	var last string // why ok said false last
	ok := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if c.State() != client.Live {
			return false
		}
		ids := c.RecordIDs()
		last = fmt.Sprintf("records of %v, want %v", ids, want)
		if !slices.Equal(ids, want) {
			return false
		}
		for _, uid := range ids {
			if r, _ := c.Record(uid); !r.Equal(records[uid]) {
				last = fmt.Sprintf("%s: %+v, want %+v", uid, r, records[uid])
				return false
			}
		}
		return true
	}
	if !assert.Eventually(t, ok, waitLong, 5*time.Millisecond, "the records of the users seen") {
		mu.Lock()
		t.Fatal(last)
	}
	t.Logf("%d connected, %d seen", len(conns), len(want))
}
