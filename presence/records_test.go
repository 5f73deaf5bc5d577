package presence

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

func set(t *testing.T, n *Node, c Client, s protocol.Set) {
	t.Helper()
	require.NoError(t, n.Set(c, s))
}

func modeSet(m string) protocol.Set { return protocol.Set{Mode: m} }

func noteSet(text string, until int64) protocol.Set {
	return protocol.Set{NoteSet: true, Note: &protocol.Note{Text: text, Until: until}}
}

// A note with an until clears at the first step of the clock at or past
// until: never before it, and within one tick after, counted in the
// clock's own steps so that a busy machine cannot make it flaky. The clear
// goes out like a set, and is one update edge.
func TestANoteClearsAtTheFirstStepPastUntil(t *testing.T) {
	type step struct{ start, end time.Time }
	var mu sync.Mutex
	var steps []step
	var cleared []Edge
	const tick = 50 * time.Millisecond
	n := newNode(t, Config{Slots: 31, Tick: tick,
		OnStep: func(took time.Duration) {
			end := time.Now()
			mu.Lock()
			steps = append(steps, step{end.Add(-took), end})
			mu.Unlock()
		},
		OnEdges: func(edges []Edge) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range edges {
				if e.Kind == EdgeUpdate && e.Record.Note == nil {
					cleared = append(cleared, e)
				}
			}
		}})
	alice := connect(t, n, "alice", "lobby")
	bob := connect(t, n, "bob", "lobby")
	until := time.Now().Add(700 * time.Millisecond).UnixMilli()
	set(t, n, alice, noteSet("back soon", until))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(cleared) > 0
	}, 20*time.Second, time.Millisecond)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, cleared, 1, "one update edge")
	at := cleared[0].At
	assert.GreaterOrEqual(t, at.UnixMilli(), until, "not before until")
	// The ring counts steps: when the process stalls, the clock catches up
	// with steps in a burst, and a note due at one of them may clear a
	// few steps that began past until late in wall time. Without a stall,
	// no step that began at or past until passes it by.
	var late []step
	stalled := false
	for i, s := range steps {
		if i > 0 && s.start.Sub(steps[i-1].start) > 2*tick {
			stalled = true
		}
		if s.start.UnixMilli() >= until && s.end.Before(at) {
			late = append(late, s)
		}
	}
	if !stalled {
		assert.Empty(t, late, "no step that began at or past until passed it by")
	}
	t.Logf("cleared %d ms after until, with a %v tick (the clock stalled: %v)", at.UnixMilli()-until, tick, stalled)
	var got []string
	for _, f := range bob.take() {
		if strings.Contains(f, `"updated"`) {
			got = append(got, f)
		}
	}
	assert.Equal(t, []string{
		`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"note":{"text":"back soon","until":` + fmt.Sprint(until) + `}}}}`,
		`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{}}}`,
	}, got)
}

// The target: a channel of 5,000 members where 1,000 change their note
// within one tick gets one presence frame per member for that tick (a
// fifth of it under the race detector, which would take a minute).
func TestAThousandNotesInOneTickAreOneFramePerMember(t *testing.T) {
	members, changing := 5000, 1000
	if raceEnabled {
		members, changing = 1000, 200
	}
	n := newNode(t, Config{PresenceLists: members})
	clients := make([]*client, members)
	for i := range clients {
		clients[i] = connect(t, n, fmt.Sprintf("u%05d", i), "big")
	}
	n.Step()
	for _, c := range clients {
		c.take()
	}
	for i := range changing {
		set(t, n, clients[i*members/changing], noteSet(fmt.Sprintf("note %d", i), 0))
	}
	start := time.Now()
	n.Step()
	took := time.Since(start)
	var bytes int
	for i, c := range clients {
		frames := c.takeRaw()
		require.Len(t, frames, 1, "client %d", i)
		assert.Contains(t, frames[0], `"updated":{`)
		bytes += len(frames[0])
	}
	t.Logf("%d members, %d notes in one tick: one frame each, %d B per frame, %.1f MB in all, step %v",
		members, changing, bytes/members, float64(bytes)/1e6, took)
}

// An invisible user's own connections see it as before: their snapshot
// and pages count and list it and say its mode, while others see none of
// it.
func TestInvisibleSeesItself(t *testing.T) {
	n := newNode(t, Config{})
	bob := connect(t, n, "bob", "lobby")
	alice := connect(t, n, "alice")
	set(t, n, alice, modeSet(protocol.ModeInvisible))
	require.NoError(t, n.Join(context.Background(), alice, "lobby"))
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":2,"members":["alice","bob"],"users":{"alice":{"mode":"invisible"}},"mode":"invisible"}`}, alice.take())
	require.NoError(t, n.SendMembers(alice, "lobby", "", 10))
	assert.Equal(t, []string{`{"type":"members","channel":"lobby","count":2,"members":["alice","bob"],"users":{"alice":{"mode":"invisible"}}}`}, alice.take())
	require.NoError(t, n.SendMembers(bob, "lobby", "", 10))
	n.Step()
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":1,"members":["bob"]}`, `{"type":"members","channel":"lobby","count":1,"members":["bob"]}`}, bob.take(), "nothing of her")
	carol := connect(t, n, "carol", "lobby")
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":3,"joins":["carol"],"leaves":[]}`}, alice.take(), "she counts herself")
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":["carol"],"leaves":[]}`}, bob.take())
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":2,"members":["bob","carol"]}`}, carol.take())
}

// Pages for a client leave invisible users out of the count and the list,
// and page on exactly: a page is full while visible members follow.
func TestVisibleMembersPageAroundInvisibleOnes(t *testing.T) {
	n := newNode(t, Config{})
	ctx := context.Background()
	for _, uid := range []string{"a", "b", "c", "d", "e", "f"} {
		c := connect(t, n, uid, "lobby")
		if uid == "b" || uid == "c" || uid == "e" {
			set(t, n, c, modeSet(protocol.ModeInvisible))
		}
	}
	var pages [][]string
	after := ""
	for {
		count, members, next, err := n.VisibleMembers(ctx, "lobby", after, 2)
		require.NoError(t, err)
		assert.Equal(t, 3, count)
		pages = append(pages, members)
		if next == "" {
			break
		}
		after = next
	}
	assert.Equal(t, [][]string{{"a", "d"}, {"f"}}, pages)
	count, users, err := n.VisibleUsers(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 3, count)
	assert.Equal(t, []string{"a", "d", "f"}, users)
	count, _, _, err = n.Members(ctx, "lobby", "", 10)
	require.NoError(t, err)
	assert.Equal(t, 6, count, "the server side counts everyone")
}

// A record outlives its user by the last-seen TTL and no more: a reconnect
// within it keeps the mode and the note, one after it starts afresh.
func TestRecordsLastAsLongAsLastSeen(t *testing.T) {
	n := newNode(t, Config{Tick: time.Second, LastSeenTTL: 3 * time.Second})
	alice := connect(t, n, "alice")
	set(t, n, alice, protocol.Set{Mode: protocol.ModeDND, NoteSet: true, Note: &protocol.Note{Text: "away"}})
	n.Disconnect(alice)
	n.Step()
	alice = connect(t, n, "alice")
	assert.Equal(t, "dnd", n.RecordOf("alice").Mode, "kept within the TTL")
	n.Disconnect(alice)
	for range 5 {
		n.Step()
	}
	recs, err := n.Records(context.Background(), []string{"alice"})
	require.NoError(t, err)
	assert.Empty(t, recs, "gone after it")
	connect(t, n, "alice")
	assert.True(t, n.RecordOf("alice").IsZero())
}

// BenchmarkAThousandNotesInOneTick is the step of a tick in which 1,000 of
// a channel's 5,000 members change their note: one frame per member.
func BenchmarkAThousandNotesInOneTick(b *testing.B) {
	const members, changing = 5000, 1000
	n, err := New(Config{PresenceLists: members})
	require.NoError(b, err)
	defer n.Close()
	clients := make([]*client, members)
	for i := range clients {
		clients[i] = &client{name: fmt.Sprint(i)}
		require.NoError(b, n.Connect(context.Background(), clients[i], fmt.Sprintf("u%05d", i), []string{"big"}))
	}
	n.Step()
	var bytes int
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for _, c := range clients {
			c.takeRaw()
		}
		for j := range changing {
			require.NoError(b, n.Set(clients[j*members/changing], noteSet(fmt.Sprintf("note %d.%d", i, j), 0)))
		}
		b.StartTimer()
		n.Step()
		b.StopTimer()
		bytes = 0
		for _, c := range clients {
			for _, f := range c.takeRaw() {
				bytes += len(f)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(bytes)/members, "B/member")
}

// An invisible user that goes and comes back stays invisible: its own
// snapshot says so, and the others hear nothing of either.
func TestInvisibleStaysInvisibleAcrossAReconnect(t *testing.T) {
	n := newNode(t, Config{})
	alice := connect(t, n, "alice", "lobby")
	bob := connect(t, n, "bob", "lobby")
	set(t, n, alice, protocol.Set{Mode: protocol.ModeInvisible, NoteSet: true, Note: &protocol.Note{Text: "hiding"}})
	n.Step()
	bob.take()
	n.Disconnect(alice)
	n.Step()
	again := connect(t, n, "alice", "lobby")
	n.Step()
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":2,"members":["alice","bob"],"users":{"alice":{"mode":"invisible","note":{"text":"hiding"}}},"mode":"invisible"}`}, again.take())
	assert.Empty(t, bob.take())
	assert.Equal(t, protocol.ModeInvisible, n.RecordOf("alice").Mode)
}

// An embedder's Set is checked as a client's set frame is: refused whole,
// with an error that names the field.
func TestSetIsCheckedForEmbeddersToo(t *testing.T) {
	n := newNode(t, Config{})
	alice := connect(t, n, "alice")
	for _, tc := range []struct {
		set   protocol.Set
		field string
	}{
		{protocol.Set{}, `"mode"`},
		{protocol.Set{Mode: "busy"}, `"mode"`},
		{protocol.Set{Mode: protocol.ModeDND, NoteSet: true, Note: &protocol.Note{}}, `"note.text"`},
		{protocol.Set{NoteSet: true, Note: &protocol.Note{Text: strings.Repeat("x", 129)}}, `"note.text"`},
		{protocol.Set{NoteSet: true, Note: &protocol.Note{Emoji: strings.Repeat("🙂", 17)}}, `"note.emoji"`},
		{protocol.Set{NoteSet: true, Note: &protocol.Note{Text: "x", Until: time.Now().Add(-time.Second).UnixMilli()}}, `"note.until"`},
	} {
		err := n.Set(alice, tc.set)
		require.Error(t, err, "%+v", tc.set)
		assert.Contains(t, err.Error(), tc.field)
	}
	assert.True(t, n.RecordOf("alice").IsZero(), "nothing changed")
}
