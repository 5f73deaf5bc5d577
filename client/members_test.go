package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
)

// TestMembersConverge: a Client following a channel of 300 members, more
// than a snapshot lists, loads them page by page while 200 others join and
// leave (each at least once, before, between and after the cuts), is cut
// off three times (once while 50 members leave), and ends with exactly the
// server's member set, from its snapshots, pages and diffs alone.
func TestMembersConverge(t *testing.T) {
	cfg := realClock()
	cfg.presence.MemberList = 100
	s := startServer(t, cfg)
	const room = "big"
	var stay []*member
	for i := range 300 {
		stay = append(stay, s.connect(t, fmt.Sprintf("m%03d", i), room))
	}
	var d dialer
	opts := fast("watcher", room)
	opts.Dialer = d.websocket()
	opts.PageLimit = 40
	c := dial(t, s, opts)
	first := c.Channel(room)
	assert.Equal(t, 301, first.Count)
	assert.Len(t, first.Members, 100, "the snapshot is cut at the member list")
	assert.False(t, first.Complete)

	// 200 others join and leave, each again and again, until stop.
	stop := make(chan struct{})
	var (
		churn   sync.WaitGroup
		ops     atomic.Int64 // joins and leaves so far
		covered atomic.Int64 // others who joined and left at least once
	)
	for w := range 4 {
		churn.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			others := make([]*member, 50)
			left := make([]bool, 50)
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(len(others))
				if others[i] == nil {
					others[i] = s.connect(t, fmt.Sprintf("o%d-%02d", w, i), room)
				} else {
					s.disconnect(others[i])
					others[i] = nil
					if !left[i] {
						left[i] = true
						covered.Add(1)
					}
				}
				ops.Add(1)
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
			}
		})
	}
	// churned waits until n more joins and leaves were made.
	churned := func(n int64) {
		mark := ops.Load()
		eventually(t, func() bool { return ops.Load() >= mark+n }, "churn")
	}
	stopChurn := sync.OnceFunc(func() { close(stop); churn.Wait() })
	t.Cleanup(stopChurn)

	ctx := ctxLong(t)
	require.NoError(t, c.LoadMembers(ctx, room))
	for i := range 3 {
		churned(100)
		if i == 1 {
			d.hold()
		}
		d.cut()
		nextState(t, c, client.Waiting)
		if i == 1 {
			for _, m := range stay[:50] {
				s.disconnect(m)
			}
			d.release()
		}
		nextState(t, c, client.Live)
	}
	eventually(t, func() bool { return covered.Load() == 200 }, "every other joined and left")
	stopChurn()
	t.Logf("churn: %d joins and leaves; all 200 others joined and left at least once", ops.Load())

	want := func() []string { return s.members(t, room) }
	eventually(t, func() bool {
		st := c.Channel(room)
		return st.Complete && assert.ObjectsAreEqual(want(), st.Members)
	}, "the Client holds the server's members")
	st := c.Channel(room)
	assert.Equal(t, len(st.Members), st.Count)
	assert.NotContains(t, st.Members, "m000", "left while the Client was cut off")
	assert.Contains(t, st.Members, "m299")
	assert.Equal(t, int64(4), s.upgrades.Load())
}

// TestLoadMembersWaitsWhileReconnecting: a LoadMembers made while the
// Client cannot connect waits until it is live again, or its ctx ends.
func TestLoadMembersWaitsWhileReconnecting(t *testing.T) {
	cfg := realClock()
	cfg.presence.MemberList = 2
	s := startServer(t, cfg)
	for i := range 5 {
		s.connect(t, fmt.Sprintf("m%d", i), "lobby")
	}
	var d dialer
	opts := fast("alice", "lobby")
	opts.Dialer = d.websocket()
	alice := dial(t, s, opts)
	d.hold()
	d.cut()
	nextState(t, alice, client.Connecting)

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, alice.LoadMembers(short, "lobby"), context.DeadlineExceeded)

	done := make(chan error, 1)
	go func() { done <- alice.LoadMembers(ctxLong(t), "lobby") }()
	d.release()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitLong):
		t.Fatal("LoadMembers did not return")
	}
	assert.Equal(t, client.ChannelState{Count: 6, Members: []string{"alice", "m0", "m1", "m2", "m3", "m4"}, Complete: true}, alice.Channel("lobby"))
}
