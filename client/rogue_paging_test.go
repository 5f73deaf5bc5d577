package client_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// pagingRogue answers the join of "lobby" with a snapshot cut short (10
// members, alice listed) and the n-th members request (from 1) with
// page(n, after); requests counts them.
func pagingRogue(t *testing.T, requests *atomic.Int64, page func(n int64, after string) protocol.MembersPage) *rogue {
	return startRogue(t, func(_ int64, ws *websocket.Conn) {
		if sendWelcome(ws) != nil {
			return
		}
		for {
			f, err := recv(ws)
			if err != nil {
				return
			}
			switch f := f.(type) {
			case protocol.Join:
				_ = send(ws, protocol.Joined{Channel: f.Channel, Count: 10, Members: []string{"alice"}})
			case protocol.Members:
				p := page(requests.Add(1), f.After)
				p.Channel = f.Channel
				_ = send(ws, p)
			}
		}
	})
}

// TestPagingStopsWhenNextStalls: a server that answers every members
// request with the same next would have LoadMembers ask forever; it stops
// at the second page, whose next does not come after its after, and the
// first page's members stay.
func TestPagingStopsWhenNextStalls(t *testing.T) {
	var requests atomic.Int64
	r := pagingRogue(t, &requests, func(int64, string) protocol.MembersPage {
		return protocol.MembersPage{Count: 10, Members: []string{"alice", "bob"}, Next: "bob"}
	})
	c := dialRogue(t, r, client.Options{UID: "alice", Channels: []string{"lobby"}})
	start := time.Now()
	err := c.LoadMembers(ctxLong(t), "lobby")
	took := time.Since(start)
	require.ErrorIs(t, err, client.ErrProtocol)
	assert.ErrorContains(t, err, `next "bob" does not come after "bob"`)
	assert.Equal(t, int64(2), requests.Load(), "page requests")
	time.Sleep(200 * time.Millisecond) // room for any request that should not come
	assert.Equal(t, int64(2), requests.Load(), "page requests, a moment later")
	t.Logf("%d page requests, LoadMembers returned after %v, none in the 200 ms after: %v", requests.Load(), took, err)
	assert.Equal(t, client.ChannelState{Count: 10, Members: []string{"alice", "bob"}}, c.Channel("lobby"))
	assert.Equal(t, client.Live, c.State(), "the connection stays: only paging is broken")
}

// TestBadPagesStopPaging: a page that lists members not after the
// request's after, out of order, more than asked for, more than its count,
// with a next that is not its last member or a negative count, ends
// LoadMembers with ErrProtocol and is not applied: the members that only
// it listed (z...) never show.
func TestBadPagesStopPaging(t *testing.T) {
	cases := []struct {
		name  string
		pages map[string]protocol.MembersPage // by after
		want  string
	}{
		{"not after after", map[string]protocol.MembersPage{
			"":      {Count: 10, Members: []string{"bob", "carol"}, Next: "carol"},
			"carol": {Count: 10, Members: []string{"bob", "zed"}, Next: "zed"},
		}, `member "bob" out of order after "carol"`},
		{"out of order", map[string]protocol.MembersPage{
			"": {Count: 10, Members: []string{"zed", "bob"}, Next: "bob"},
		}, `member "bob" out of order after "zed"`},
		{"repeated", map[string]protocol.MembersPage{
			"": {Count: 10, Members: []string{"zed", "zed"}, Next: "zed"},
		}, `member "zed" out of order after "zed"`},
		{"more than asked", map[string]protocol.MembersPage{
			"": {Count: 10, Members: []string{"bob", "carol", "zed"}, Next: "zed"},
		}, "3 members, 2 asked for"},
		{"more than counted", map[string]protocol.MembersPage{
			"": {Count: 1, Members: []string{"bob", "zed"}},
		}, "2 members listed of a count of 1"},
		{"next not its last", map[string]protocol.MembersPage{
			"": {Count: 10, Members: []string{"bob", "zed"}, Next: "zz"},
		}, `next "zz" is not its last member`},
		{"next on an empty page", map[string]protocol.MembersPage{
			"": {Count: 10, Next: "zed"},
		}, `next "zed" is not its last member`},
		{"negative count", map[string]protocol.MembersPage{
			"": {Count: -7, Members: []string{"zed"}},
		}, "count -7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int64
			r := pagingRogue(t, &requests, func(_ int64, after string) protocol.MembersPage { return tc.pages[after] })
			opts := client.Options{UID: "alice", Channels: []string{"lobby"}, PageLimit: 2}
			c := dialRogue(t, r, opts)
			err := c.LoadMembers(ctxLong(t), "lobby")
			require.ErrorIs(t, err, client.ErrProtocol)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, int64(len(tc.pages)), requests.Load(), "page requests")
			st := c.Channel("lobby")
			assert.Equal(t, 10, st.Count, "the count of the snapshot")
			for _, m := range st.Members {
				assert.False(t, strings.HasPrefix(m, "z"), "member %q of a bad page applied", m)
			}
			assert.False(t, st.Complete)
			assert.Equal(t, client.Live, c.State())
		})
	}
}
