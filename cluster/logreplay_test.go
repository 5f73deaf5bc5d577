package cluster

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// logState is the presence a replay of edges rebuilds: who is online and
// each channel's members. apply refuses an edge that says what the state
// already is: each user's and each membership's edges alternate. A whole
// state (one replayed from the log's start, not from a snapshot of users
// or of one channel) also refuses what the order across shards rules out:
// a join of a user not online, an offline of a user still a member.
type logState struct {
	online  map[string]bool
	members map[string]map[string]bool
	whole   bool
	in      map[string]int // uid -> the channels it is a member of, if whole
}

func newLogState() *logState {
	return &logState{online: map[string]bool{}, members: map[string]map[string]bool{}}
}

func newWholeLogState() *logState {
	s := newLogState()
	s.whole, s.in = true, map[string]int{}
	return s
}

func (s *logState) member(channel string) map[string]bool {
	if s.members[channel] == nil {
		s.members[channel] = map[string]bool{}
	}
	return s.members[channel]
}

func (s *logState) apply(e presence.Edge) error {
	switch e.Kind {
	case presence.EdgeOnline, presence.EdgeOffline:
		on := e.Kind == presence.EdgeOnline
		if s.online[e.UID] == on {
			return fmt.Errorf("%s: it already is", edgeText(e))
		}
		if s.whole && !on && s.in[e.UID] > 0 {
			return fmt.Errorf("%s: still a member of %d channels", edgeText(e), s.in[e.UID])
		}
		s.online[e.UID] = on
	case presence.EdgeJoin, presence.EdgeLeave:
		in := e.Kind == presence.EdgeJoin
		m := s.member(e.Channel)
		if m[e.UID] == in {
			return fmt.Errorf("%s: it already is", edgeText(e))
		}
		if s.whole && in && !s.online[e.UID] {
			return fmt.Errorf("%s: not online", edgeText(e))
		}
		m[e.UID] = in
		if s.whole && in {
			s.in[e.UID]++
		} else if s.whole {
			s.in[e.UID]--
		}
	}
	return nil
}

func edgeText(e presence.Edge) string {
	return fmt.Sprintf("%s %s %s %s", e.ID, e.Kind, e.UID, e.Channel)
}

func newRand(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0)) }

// users lists the online users, sorted.
func (s *logState) users() []string { return trueKeys(s.online) }

func trueKeys(m map[string]bool) []string {
	out := []string{}
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// logEnd is the cursor at the end of the log as it is now, with its
// positions.
func logEnd(t *testing.T, e *Engine) logCursor {
	t.Helper()
	var cursor string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		_, _, cursor, err = e.UsersAt(context.Background(), 0)
		assert.NoError(c, err)
	}, testWait, 20*time.Millisecond, "the log's end")
	cur, err := decodeCursor(cursor, len(e.keys))
	require.NoError(t, err)
	return cur
}

// reached reports whether cursor is at or past end in every shard.
func reached(t require.TestingT, e *Engine, cursor string, end logCursor) bool {
	if cursor == "" {
		return false
	}
	cur, err := decodeCursor(cursor, len(e.keys))
	require.NoError(t, err)
	for i, p := range cur.pos {
		if p.less(end.pos[i]) {
			return false
		}
	}
	return true
}

// replayUntil reads edges after cursor in pages of limit until the cursor
// reaches end, each edge once and in the log's order.
func replayUntil(t *testing.T, e *Engine, cursor string, limit int, end logCursor) []presence.Edge {
	t.Helper()
	edges := []presence.Edge{}
	deadline := time.Now().Add(2 * testWait)
	for !reached(t, e, cursor, end) {
		page, next, err := e.Edges(context.Background(), cursor, limit)
		require.NoError(t, err, "Edges after %q", cursor)
		if len(page) == 0 {
			require.False(t, time.Now().After(deadline), "replay did not reach the end in %v", 2*testWait)
			time.Sleep(20 * time.Millisecond) // the last entries settle
		}
		edges, cursor = append(edges, page...), next
	}
	assertMergedOrder(t, e.cfg.Prefix, edges)
	return edges
}

// A churn of users and memberships over two nodes, snapshots taken in the
// middle of it: each snapshot's listing and the edges after its cursor
// rebuild exactly the final online set and each channel's members; the
// whole log, from the start, rebuilds them too, in an order where a join
// follows its user's online and an offline its user's leaves.
func TestLogSnapshotThenReplay(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	})
	rng := newRand(seed)
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	nodes := []*node{a, b}
	uids := uidsOf("u", 16)
	channels := []string{"room", "hall", "den"}
	held := []map[string]bool{{}, {}}
	in := []map[string]map[string]bool{{}, {}}
	for i := range nodes {
		for _, ch := range channels {
			in[i][ch] = map[string]bool{}
		}
	}
	type snapshot struct {
		users   []string
		ucursor string
		members map[string][]string
		cursors map[string]string
	}
	var snaps []snapshot
	ctx := context.Background()
	for step := range 400 {
		i := rng.IntN(2)
		n, uid, ch := nodes[i], uids[rng.IntN(len(uids))], channels[rng.IntN(len(channels))]
		switch r := rng.IntN(10); {
		case r < 4 && held[i][uid]:
			for _, c := range channels {
				if in[i][c][uid] {
					n.SetMember(c, uid, 0, false)
					in[i][c][uid] = false
				}
			}
			n.SetUser(uid, 0, 0)
			held[i][uid] = false
		case r < 4:
			n.SetUser(uid, 1, 0)
			held[i][uid] = true
		case r < 9 && held[i][uid]:
			in[i][ch][uid] = !in[i][ch][uid]
			n.SetMember(ch, uid, map[bool]int{true: 1}[in[i][ch][uid]], false)
		case held[i][uid]:
			n.SetUser(uid, 1, rng.IntN(2))
		}
		if step%50 == 49 {
			s := snapshot{members: map[string][]string{}, cursors: map[string]string{}}
			var err error
			_, s.users, s.ucursor, err = a.UsersAt(ctx, 1000)
			require.NoError(t, err)
			for _, c := range channels {
				_, s.members[c], s.cursors[c], err = b.MembersAt(ctx, c, "", 1000)
				require.NoError(t, err)
			}
			snaps = append(snaps, s)
		}
		if step%8 == 0 {
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond) // let the writers write between steps
		}
	}
	truth := newLogState()
	for i := range nodes {
		for uid, on := range held[i] {
			truth.online[uid] = truth.online[uid] || on
		}
		for _, c := range channels {
			for uid, on := range in[i][c] {
				truth.member(c)[uid] = truth.member(c)[uid] || on
			}
		}
	}
	eventually(t, "every change landed", func(c *assert.CollectT) {
		_, users, err := a.Users(ctx, 1000)
		assert.NoError(c, err)
		assert.Equal(c, truth.users(), users)
		for _, ch := range channels {
			_, members, err := a.Members(ctx, ch, "", 1000)
			assert.NoError(c, err)
			assert.Equal(c, trueKeys(truth.member(ch)), members, ch)
		}
	})
	end := logEnd(t, a.Engine)

	all := replayUntil(t, a.Engine, "", 9, end)
	whole := newWholeLogState()
	ids := map[string]bool{}
	for _, e := range all {
		require.False(t, ids[e.ID], "edge %s twice", e.ID)
		ids[e.ID] = true
		if err := whole.apply(e); err != nil {
			for _, x := range all {
				if x.UID == e.UID {
					t.Logf("%s %s %s at %d", x.ID, x.Kind, x.Channel, x.At.UnixMilli())
				}
			}
			require.NoError(t, err, "the whole log")
		}
	}
	assert.Equal(t, truth.users(), whole.users(), "online by the whole log")
	for _, ch := range channels {
		assert.Equal(t, trueKeys(truth.member(ch)), trueKeys(whole.member(ch)), "members of %s by the whole log", ch)
	}

	for k, s := range snaps {
		users := newLogState()
		for _, uid := range s.users {
			users.online[uid] = true
		}
		for _, e := range replayUntil(t, b.Engine, s.ucursor, 5, end) {
			if e.Kind == presence.EdgeOnline || e.Kind == presence.EdgeOffline {
				require.NoError(t, users.apply(e), "snapshot %d of users", k)
			}
		}
		assert.Equal(t, truth.users(), users.users(), "snapshot %d of users, replayed", k)
		for _, ch := range channels {
			members := newLogState()
			for _, uid := range s.members[ch] {
				members.member(ch)[uid] = true
			}
			for _, e := range replayUntil(t, a.Engine, s.cursors[ch], 13, end) {
				if (e.Kind == presence.EdgeJoin || e.Kind == presence.EdgeLeave) && e.Channel == ch {
					require.NoError(t, members.apply(e), "snapshot %d of %s", k, ch)
				}
			}
			assert.Equal(t, trueKeys(truth.member(ch)), trueKeys(members.member(ch)), "snapshot %d of %s, replayed", k, ch)
		}
	}
	t.Logf("%d edges in the log, %d snapshots replayed", len(all), len(snaps))
}

// A node killed: the node that claims it makes its users' leaves and
// offlines, and a replay from before the kill reads each once, a user's
// leaves before its offline, and nothing else.
func TestLogReplayAcrossNodeKill(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	ctx := context.Background()
	uids := uidsOf("k", 6)
	for _, uid := range uids {
		a.SetUser(uid, 1, 0)
		a.SetMember("room", uid, 1, false)
		a.SetMember("hall", uid, 1, false)
	}
	b.SetUser("k0", 1, 0)
	b.SetMember("room", "k0", 1, false)
	eventually(t, "a's users online", func(c *assert.CollectT) {
		n, _, err := b.Users(ctx, 0)
		assert.NoError(c, err)
		assert.Equal(c, 6, n)
		n, _, err = b.Members(ctx, "hall", "", 0)
		assert.NoError(c, err)
		assert.Equal(c, 6, n)
		st, err := b.Status(ctx, "k0")
		assert.NoError(c, err)
		assert.Equal(c, 2, st.Conns)
		n, _, err = b.Members(ctx, "room", "", 0)
		assert.NoError(c, err)
		assert.Equal(c, 6, n)
	})
	_, _, cursor, err := b.UsersAt(ctx, 0)
	require.NoError(t, err)

	a.crash()
	a.stopRun()
	eventually(t, "b claimed a", func(c *assert.CollectT) {
		_, users, err := b.Users(ctx, 100)
		assert.NoError(c, err)
		assert.Equal(c, []string{"k0"}, users)
		_, members, err := b.Members(ctx, "hall", "", 100)
		assert.NoError(c, err)
		assert.Empty(c, members)
		_, members, err = b.Members(ctx, "room", "", 100)
		assert.NoError(c, err)
		assert.Equal(c, []string{"k0"}, members)
	})
	edges := replayUntil(t, b.Engine, cursor, 4, logEnd(t, b.Engine))
	byUser := map[string][]string{}
	for _, e := range edges {
		byUser[e.UID] = append(byUser[e.UID], e.Kind.String()+" "+e.Channel)
	}
	assert.Equal(t, []string{"leave hall"}, byUser["k0"], "k0 stays on b, and in room")
	for _, uid := range uids[1:] {
		got := byUser[uid]
		require.NotEmpty(t, got, "edges of %s", uid)
		assert.ElementsMatch(t, []string{"leave room", "leave hall", "offline "}, got, "edges of %s", uid)
		assert.Equal(t, "offline ", got[len(got)-1], "%s's leaves before its offline, in the log's order", uid)
	}
	assert.ElementsMatch(t, uids, slices.Collect(maps.Keys(byUser)))
}

// A log trimmed as Config.Log asks: a cursor behind what it keeps is a
// CursorError, not lost, and its Oldest reads on from the oldest kept.
func TestLogTrimmedByConfig(t *testing.T) {
	cases := []struct {
		name string
		log  presence.LogConfig
	}{
		{"by Max", presence.LogConfig{Max: 50}},
		{"by Keep", presence.LogConfig{Keep: time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t)
			cfg := testConfig(srv.client(t), "a")
			cfg.Shards, cfg.Log = 1, tc.log
			a := startNode(t, cfg)
			ctx := context.Background()
			_, _, start, err := a.UsersAt(ctx, 0)
			require.NoError(t, err)
			uids := uidsOf("u", 200)
			for _, on := range []int{1, 0} {
				for _, uid := range uids {
					a.SetUser(uid, on, 0)
				}
				eventually(t, "the users landed", func(c *assert.CollectT) {
					n, _, err := a.Users(ctx, 0)
					assert.NoError(c, err)
					assert.Equal(c, on*len(uids), n)
				})
			}
			n, oldest, err := a.LogStats(ctx)
			require.NoError(t, err)
			assert.Less(t, n, 400, "entries kept")
			assert.False(t, oldest.IsZero())
			_, _, err = a.Edges(ctx, start, 10)
			var gone *presence.CursorError
			require.ErrorAs(t, err, &gone)
			assert.False(t, gone.Lost, "trimmed, not lost")
			edges, _ := replay(t, a.Engine, gone.Oldest, 100, n)
			assert.Len(t, edges, n, "Oldest reads what is kept")
			assert.Equal(t, presence.EdgeOffline, edges[len(edges)-1].Kind)
			t.Logf("%d of 400 edges kept, the oldest from %v ago", n, time.Since(oldest).Round(time.Millisecond))
		})
	}
}
