package cluster

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// A call asks for a run of lost calls, lo-hi: it gets the edges of every
// reply the shard kept in it, and none of a reply outside it.
func TestScriptsRecallARunOfLostCalls(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	k := newShardKeys("s", 0)

	_, edges := numberedSet(t, c, k, "a", 1, 1, "", "u", "x", 1) // answered, kept
	require.Equal(t, []string{"online x"}, edges)
	numberedSet(t, c, k, "a", 2, 1, "", "u", "y", 1) // lost
	numberedSet(t, c, k, "a", 3, 1, "")              // lost, without an edge
	numberedSet(t, c, k, "a", 5, 1, "", "u", "z", 1) // lost
	state, edges := numberedSet(t, c, k, "a", 6, 1, "2-5", "u", "w", 1)
	assert.Equal(t, int64(0), state)
	assert.Equal(t, []string{"online y", "online z", "online w"}, edges, "the run's edges first, none of call 1")

	state, edges = numberedSet(t, c, k, "a", 7, 1, "1,3-4")
	assert.Equal(t, int64(0), state)
	assert.Equal(t, []string{"online x"}, edges, "a number and a run with no reply kept in it")
}

// Redis is out of reach for a minute at the default settings, the writer
// driven by hand, one round per retry: renewals alone fail for half of
// it, then writes of users who came online meanwhile, the first of which
// ran though its reply was lost. What the writer must recall stays one run
// per shard, the first calls after the outage answer well within their
// timeout, and each user comes online once.
func TestALongOutageLeavesAShortRecallList(t *testing.T) {
	srv := startRedis(t)
	p := startProxy(t, srv.addr())
	e, err := New(Config{Client: p.client(t), Node: "a", Prefix: "t"})
	require.NoError(t, err)
	t.Cleanup(e.crash)
	rec := newRecorder()
	e.Attach(rec)
	w := e.w
	w.stop() // the test is the loop from now on
	<-w.done
	ctx := context.Background()
	e.Apply(presence.Change{Kind: presence.ChangeUser, UID: "warm", N: 1})
	require.NoError(t, w.renew(ctx))
	require.Equal(t, 1, rec.producedCount("warm", true))

	const rounds = 60 // w.retry apart: a minute at the defaults
	require.Equal(t, time.Second, w.retry)
	listed := func() (n int) {
		for _, l := range w.unknown {
			n += len(l.runs)
		}
		return n
	}
	p.cut(true)
	for range rounds / 2 {
		require.Error(t, w.renew(ctx))
	}
	t.Logf("after %d rounds of renewals alone: %d listed", rounds/2, listed())
	assert.Zero(t, listed(), "a renewal leaves nothing to recall")

	// A write of these users runs, and its reply is lost in the outage.
	p.cut(false)
	const users = 40
	uid := func(i int) string { return "u" + strconv.Itoa(i) }
	last, lastField := w.keys[w.shard(uid(users-1))].tag+":u", w.cfg.Node+" "+uid(users-1)
	p.stallAfterSent("$3\r\n" + uid(users-1) + "\r\n")
	for i := range users {
		e.Apply(presence.Change{Kind: presence.ChangeUser, UID: uid(i), N: 1})
	}
	done := make(chan error, 1)
	go func() { done <- w.renew(ctx) }()
	direct := srv.client(t)
	require.Eventually(t, func() bool { return direct.HGet(ctx, last, lastField).Val() == "1" }, testWait, 10*time.Millisecond,
		"the write with the last user ran")
	p.cut(true)
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(testWait):
		t.Fatal("the write did not return")
	}
	for range rounds/2 - 1 {
		require.Error(t, w.renew(ctx))
	}
	t.Logf("after %d rounds: %d listed in %d shards", rounds, listed(), len(w.unknown))
	for s, l := range w.unknown {
		assert.LessOrEqual(t, len(l.runs), 1, "shard %d: %s", s, l.arg())
	}

	p.cut(false)
	start := time.Now()
	require.NoError(t, w.renew(ctx), "the first calls after the outage")
	took := time.Since(start)
	t.Logf("the first round after the outage took %v (timeout %v)", took.Round(time.Millisecond), w.opTimeout())
	assert.Zero(t, listed(), "all recalled")
	for i := range users {
		assert.Equal(t, 1, rec.producedCount(uid(i), true), "%s online", uid(i))
	}
}

// Failed calls join the last run unless a call of the shard was answered
// after it.
func TestLostCallsRuns(t *testing.T) {
	type call struct {
		v        int64
		answered bool
	}
	for _, tc := range []struct {
		name  string
		calls []call
		want  string
	}{
		{"none lost", []call{{1, true}, {2, true}}, ""},
		{"one run", []call{{1, true}, {2, false}, {5, false}, {9, false}}, "2-9"},
		{"broken by an answer", []call{{2, false}, {3, false}, {4, true}, {6, false}}, "2-3,6"},
		{"answered before", []call{{4, true}, {6, false}, {7, false}}, "6-7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l lostCalls
			for _, c := range tc.calls {
				l.note(c.v, c.answered)
			}
			assert.Equal(t, tc.want, l.arg())
		})
	}
}

// A shard whose list is full gets only the call that asks for it; the
// others fail unsent, and once that call is answered the list is empty.
func TestAFullRecallListSendsOnlyTheAsker(t *testing.T) {
	srv := startRedis(t)
	e, err := New(Config{Client: srv.client(t), Node: "a", Prefix: "t", Shards: 1})
	require.NoError(t, err)
	t.Cleanup(e.crash)
	w := e.w
	w.stop()
	<-w.done
	for i := range maxLostRuns {
		w.unknown[0].runs = append(w.unknown[0].runs, callRun{int64(2*i + 1), int64(2*i + 1)})
		w.writes = int64(2*i + 2)
	}
	calls := []scriptCall{w.setCall(0, []record{{uid: "x", n: 1}}, modeWrite), w.setCall(0, []record{{uid: "y", n: 1}}, modeWrite)}
	cmds := w.runScripts(context.Background(), setScript, calls)
	require.NoError(t, cmds[0].Err(), "the asker")
	require.ErrorIs(t, cmds[1].Err(), errLostRuns)
	assert.Empty(t, w.unknown[0].runs, "recalled; the one unsent is not listed")
}
