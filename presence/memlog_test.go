package presence

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

var logSeed = flag.Uint64("log.seed", 0, "seed of TestMemoryLogReplaysFromASnapshot (0: from the clock)")

// producedRelay keeps the edges an engine produced, in the order heard.
type producedRelay struct {
	mu    sync.Mutex
	edges []Edge
}

func (r *producedRelay) Receive(e Event) {
	if e.Kind == EventProduced {
		r.mu.Lock()
		r.edges = append(r.edges, e.Edge)
		r.mu.Unlock()
	}
}

func newLoggedEngine(t *testing.T, cfg LogConfig) (*memoryEngine, *producedRelay) {
	t.Helper()
	e, err := NewMemoryEngineWith(cfg)
	require.NoError(t, err)
	r := &producedRelay{}
	e.Attach(r)
	return e.(*memoryEngine), r
}

// logState is what a backend keeps of presence: who is online, and who is
// in which channel.
type logState struct {
	online  map[string]bool
	members map[string]map[string]bool
}

func newLogState(users []string) logState {
	s := logState{online: map[string]bool{}, members: map[string]map[string]bool{}}
	for _, u := range users {
		s.online[u] = true
	}
	return s
}

func (s logState) apply(e Edge) {
	switch e.Kind {
	case EdgeOnline:
		s.online[e.UID] = true
	case EdgeOffline:
		delete(s.online, e.UID)
	case EdgeJoin:
		if s.members[e.Channel] == nil {
			s.members[e.Channel] = map[string]bool{}
		}
		s.members[e.Channel][e.UID] = true
	case EdgeLeave:
		delete(s.members[e.Channel], e.UID)
	}
}

// readAll reads the log from after to its end in pages of limit.
func readAll(t *testing.T, l EdgeLog, after string, limit int) ([]Edge, string) {
	t.Helper()
	var all []Edge
	for {
		edges, next, err := l.Edges(context.Background(), after, limit)
		require.NoError(t, err)
		all = append(all, edges...)
		if len(edges) == 0 {
			require.Equal(t, after, next, "no edge: the same cursor again")
			return all, next
		}
		after = next
	}
}

// A snapshot and the edges after its cursor give exactly the state the
// engine ends in, from snapshots taken at random points of random changes,
// and the log holds every produced edge once, in the order produced, under
// the ID the webhook sends it with.
func TestMemoryLogReplaysFromASnapshot(t *testing.T) {
	seed := *logSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	e, relay := newLoggedEngine(t, LogConfig{})
	var history []string
	defer func() {
		if t.Failed() {
			t.Logf("seed %d (go test ./presence -run TestMemoryLogReplaysFromASnapshot -log.seed %d); history:\n%s", seed, seed, strings.Join(history, "\n"))
		}
	}()
	type snap struct {
		users   []string
		members []string
		cursor  string
		mcursor string
	}
	var snaps []snap
	ctx := context.Background()
	for i := range 2000 {
		uid := fmt.Sprintf("u%d", rng.IntN(8))
		switch rng.IntN(5) {
		case 0, 1:
			n := rng.IntN(3)
			history = append(history, fmt.Sprintf("user %s n=%d", uid, n))
			e.Apply(Change{Kind: ChangeUser, UID: uid, N: n, Away: rng.IntN(n + 1)})
		case 2, 3:
			n := rng.IntN(2)
			history = append(history, fmt.Sprintf("member lobby %s n=%d", uid, n))
			e.Apply(Change{Kind: ChangeMember, Channel: "lobby", UID: uid, N: n})
		default:
			history = append(history, fmt.Sprintf("set %s dnd", uid))
			e.Apply(Change{Kind: ChangeSet, UID: uid, Set: protocol.Set{Mode: []string{protocol.ModeDND, protocol.ModeOnline}[rng.IntN(2)]}})
		}
		if i%97 == 0 {
			_, users, cursor, err := e.UsersAt(ctx, 100)
			require.NoError(t, err)
			_, members, mcursor, err := e.MembersAt(ctx, "lobby", "", 100)
			require.NoError(t, err)
			history = append(history, "snapshot at "+cursor)
			snaps = append(snaps, snap{users, members, cursor, mcursor})
		}
	}
	_, finalUsers, _, err := e.UsersAt(ctx, 100)
	require.NoError(t, err)
	_, finalMembers, _, err := e.MembersAt(ctx, "lobby", "", 100)
	require.NoError(t, err)

	for _, s := range snaps {
		edges, _ := readAll(t, e, s.cursor, 1+rng.IntN(50))
		st := newLogState(s.users)
		for _, ed := range edges {
			st.apply(ed)
		}
		assert.ElementsMatch(t, finalUsers, keys(st.online), "users from the snapshot at %s", s.cursor)

		edges, _ = readAll(t, e, s.mcursor, 1+rng.IntN(50))
		st = newLogState(nil)
		st.members["lobby"] = map[string]bool{}
		for _, m := range s.members {
			st.members["lobby"][m] = true
		}
		for _, ed := range edges {
			st.apply(ed)
		}
		assert.ElementsMatch(t, finalMembers, keys(st.members["lobby"]), "members from the snapshot at %s", s.mcursor)
	}

	all, _ := readAll(t, e, "", 7)
	relay.mu.Lock()
	defer relay.mu.Unlock()
	require.Len(t, all, len(relay.edges))
	for i, ed := range all {
		want := relay.edges[i]
		require.True(t, want.At.Equal(ed.At), "edge %d's time", i)
		want.At = ed.At
		require.Equal(t, want, ed, "the log is what the engine produced, in order: edge %d", i)
	}
	ids := map[string]bool{}
	for _, ed := range all {
		require.NotEmpty(t, ed.ID)
		require.False(t, ids[ed.ID], "IDs are unique")
		ids[ed.ID] = true
	}
}

func keys(m map[string]bool) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Past Max the oldest edges go: a cursor before them is answered with
// CursorError, not Lost, whose Oldest reads on; a cursor of another
// process, or no cursor at all, is Lost.
func TestMemoryLogCursorsItCannotAnswer(t *testing.T) {
	e, _ := newLoggedEngine(t, LogConfig{Max: 5})
	ctx := context.Background()
	_, _, start, err := e.UsersAt(ctx, 10)
	require.NoError(t, err)
	for i := range 4 {
		e.Apply(Change{Kind: ChangeUser, UID: fmt.Sprintf("u%d", i), N: 1})
	}
	_, mid, err := e.Edges(ctx, start, 2) // read two of four
	require.NoError(t, err)
	for i := range 4 {
		e.Apply(Change{Kind: ChangeUser, UID: fmt.Sprintf("u%d", i), N: 0})
	}
	n, oldest, err := e.LogStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 5, n, "Max bounds the log")
	assert.False(t, oldest.IsZero())

	for _, tc := range []struct {
		name, cursor string
		lost         bool
	}{
		{"trimmed", mid, false},
		{"the start, trimmed", start, false},
		{"another process's", "0011223344556677-1", true},
		{"not a cursor", "x", true},
		{"ahead of the log", strings.Split(mid, "-")[0] + "-99", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.Edges(ctx, tc.cursor, 10)
			var ce *CursorError
			require.ErrorAs(t, err, &ce)
			assert.ErrorIs(t, err, ErrCursorGone)
			assert.Equal(t, tc.lost, ce.Lost)
			edges, _, err := e.Edges(ctx, ce.Oldest, 10)
			require.NoError(t, err, "Oldest answers")
			assert.Len(t, edges, 5)
		})
	}
}

// An edge older than Keep goes, whatever Max.
func TestMemoryLogKeep(t *testing.T) {
	e, _ := newLoggedEngine(t, LogConfig{Keep: time.Second})
	ctx := context.Background()
	e.Apply(Change{Kind: ChangeUser, UID: "old", N: 1})
	e.mu.Lock()
	e.log.at(0).at = time.Now().Add(-2 * time.Second).UnixNano() // made two seconds ago
	e.mu.Unlock()
	e.Apply(Change{Kind: ChangeUser, UID: "new", N: 1})
	edges, _, err := e.Edges(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, edges, 1)
	assert.Equal(t, "new", edges[0].UID)
}

func TestLogConfigRejectsNegatives(t *testing.T) {
	_, err := NewMemoryEngineWith(LogConfig{Keep: -time.Second})
	require.ErrorContains(t, err, "Keep")
	_, err = NewMemoryEngineWith(LogConfig{Max: -1})
	require.ErrorContains(t, err, "Max")
}

// An entry costs what its doc says: the memory of a busy hour's log is per
// connection.
func TestLogEntrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the figure is for 64-bit systems")
	}
	assert.EqualValues(t, 56, unsafe.Sizeof(logEntry{}))
}

// Across blocks: the newest Max are kept, numbered in a row, and read back
// from the oldest in any page size.
func TestMemoryLogAcrossBlocks(t *testing.T) {
	e, relay := newLoggedEngine(t, LogConfig{Max: 2*logBlock + 500})
	for i := range 5 * logBlock {
		e.Apply(Change{Kind: ChangeUser, UID: fmt.Sprintf("u%d", i%7), N: (i / 7) % 2})
	}
	n, _, err := e.LogStats(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2*logBlock+500, n)
	all, _ := readAll(t, e, "", 333)
	relay.mu.Lock()
	defer relay.mu.Unlock()
	want := relay.edges[len(relay.edges)-n:]
	require.Len(t, all, n)
	for i := range all {
		assert.Equal(t, want[i].ID, all[i].ID)
		assert.Equal(t, want[i].UID, all[i].UID)
	}
	assert.LessOrEqual(t, len(e.log.blocks), 4, "blocks of dropped edges go")
}
