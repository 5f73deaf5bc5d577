package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// MembersPage pages through the engine's members in order: every page at
// most limit, next the last of a page when more follow, none on the last.
func TestMembersPageWalksTheWholeChannel(t *testing.T) {
	n := newNode(t, Config{Slots: 1000})
	var want []string
	for i := range 250 {
		uid := fmt.Sprintf("u%03d", i)
		require.NoError(t, n.Heartbeat(uid, []string{"lobby"}))
		want = append(want, uid)
	}
	ctx := context.Background()
	for _, limit := range []int{1, 7, 100, 250, 1000} {
		var got []string
		after, pages := "", 0
		for {
			count, members, next, err := n.Members(ctx, "lobby", after, limit)
			require.NoError(t, err)
			assert.Equal(t, 250, count)
			require.LessOrEqual(t, len(members), limit)
			got = append(got, members...)
			pages++
			if next == "" {
				break
			}
			assert.Equal(t, members[len(members)-1], next, "next is the page's last")
			after = next
		}
		assert.Equal(t, want, got, "limit %d", limit)
		assert.Equal(t, (250+limit-1)/limit, pages, "limit %d: no empty last page", limit)
	}

	count, members, next, err := n.Members(ctx, "lobby", "u1", 2)
	require.NoError(t, err)
	assert.Equal(t, 250, count)
	assert.Equal(t, []string{"u100", "u101"}, members, "after an ID that is not a member")
	assert.Equal(t, "u101", next)

	count, members, next, err = n.Members(ctx, "nobody-here", "", 10)
	require.NoError(t, err)
	assert.Zero(t, count)
	assert.Equal(t, []string{}, members)
	assert.Empty(t, next)

	for _, tc := range []struct {
		channel, after string
		limit          int
	}{
		{"a b", "", 10},
		{"lobby", "a b", 10},
		{"lobby", "", 0},
		{"lobby", "", -1},
	} {
		_, _, _, err := n.Members(ctx, tc.channel, tc.after, tc.limit)
		assert.Error(t, err, "%+v", tc)
		assert.NotPanics(t, func() { _ = n.SendMembers(&client{}, tc.channel, tc.after, tc.limit) })
	}
}

func TestSendMembersOnlyToMembers(t *testing.T) {
	n := newNode(t, Config{})
	alice := connect(t, n, "alice", "lobby")
	bob := connect(t, n, "bob")
	alice.take()

	assert.ErrorIs(t, n.SendMembers(bob, "lobby", "", 10), ErrNotJoined)
	assert.ErrorIs(t, n.SendMembers(bob, "elsewhere", "", 10), ErrNotJoined)
	assert.ErrorIs(t, n.SendMembers(&client{}, "lobby", "", 10), ErrNotJoined, "a client the node does not know")
	assert.Empty(t, bob.take())

	require.NoError(t, n.SendMembers(alice, "lobby", "", 10))
	assert.Equal(t, []string{`{"type":"members","channel":"lobby","count":1,"members":["alice"]}`}, alice.take())

	require.NoError(t, n.Leave(alice, "lobby"))
	alice.take()
	assert.ErrorIs(t, n.SendMembers(alice, "lobby", "", 10), ErrNotJoined)
}

// A page asked for mid-tick shows the channel as the asker's snapshot and
// diffs so far left it, so that the tick's diff applies to it: a user who
// came and went since is in neither, one who went and came back is in both.
func TestPageMidTickFitsTheNextDiff(t *testing.T) {
	n := newNode(t, Config{Slots: 1000})
	for _, uid := range []string{"b", "d", "e", "f"} {
		require.NoError(t, n.Heartbeat(uid, []string{"lobby"}))
	}
	obs := connect(t, n, "obs", "lobby")
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":5,"members":["b","d","e","f","obs"]}`}, obs.take())

	c := connect(t, n, "c", "lobby")          // comes, and goes after the pages
	require.NoError(t, n.Heartbeat("e", nil)) // goes, and comes back after the pages
	connect(t, n, "a", "lobby")               // comes and stays
	require.NoError(t, n.Heartbeat("b", nil)) // goes and stays away
	require.NoError(t, n.SendMembers(obs, "lobby", "", 3))
	require.NoError(t, n.SendMembers(obs, "lobby", "e", 3))
	n.Disconnect(c)
	require.NoError(t, n.Heartbeat("e", []string{"lobby"}))
	n.Step()
	assert.Equal(t, []string{
		`{"type":"members","channel":"lobby","count":5,"members":["b","d","e"],"next":"e"}`,
		`{"type":"members","channel":"lobby","count":5,"members":["f","obs"]}`,
		`{"type":"presence","channel":"lobby","count":5,"joins":["a"],"leaves":["b"]}`,
	}, obs.take())

	// After the tick a page shows the channel as the diff left it.
	require.NoError(t, n.SendMembers(obs, "lobby", "", 10))
	assert.Equal(t, []string{`{"type":"members","channel":"lobby","count":5,"members":["a","d","e","f","obs"]}`}, obs.take())
}

// A model check: clients with truncated snapshots page through their
// channels, at random moments between random joins, leaves, connects and
// disconnects, replacing the range each page covers and applying every
// diff; once a client has paged to the end, what it believes is each
// channel's members at every tick.
func TestPagingWhileApplyingDiffsConverges(t *testing.T) {
	n := newNode(t, Config{MemberList: 3})
	rng := rand.New(rand.NewPCG(5, 6))
	channels := []string{"a", "b"}
	type pager struct {
		c        *client
		ch       string
		view     map[string]bool
		after    string
		complete bool // paged to the end since its snapshot
		asked    int  // pages asked for and not yet read
	}
	var pagers []*pager
	for i := range 4 {
		p := &pager{c: &client{name: "pager"}, ch: channels[i%2]}
		require.NoError(t, n.Connect(context.Background(), p.c, fmt.Sprintf("pager%d", i), []string{p.ch}))
		pagers = append(pagers, p)
	}
	apply := func(p *pager) {
		for _, f := range p.c.take() {
			in, err := protocol.ParseServer([]byte(f))
			require.NoError(t, err)
			switch m := in.(type) {
			case *protocol.Joined:
				p.view = map[string]bool{}
				for _, u := range m.Members {
					p.view[u] = true
				}
			case *protocol.MembersPage:
				p.asked--
				for u := range p.view { // the page is the truth between its bounds
					if u > p.after && (m.Next == "" || u <= m.Next) {
						delete(p.view, u)
					}
				}
				for _, u := range m.Members {
					require.Greater(t, u, p.after, "page after %q: %s", p.after, f)
					p.view[u] = true
				}
				if p.complete {
					require.Len(t, p.view, m.Count, "count of a page: %s", f)
				}
				p.after = m.Next
				p.complete = p.complete || m.Next == ""
			case *protocol.Presence:
				require.False(t, m.CountOnly)
				for _, u := range m.Joins {
					p.view[u] = true
				}
				for _, u := range m.Leaves {
					delete(p.view, u)
				}
				if p.complete {
					require.Len(t, p.view, m.Count, "count of a diff: %s", f)
				}
			}
		}
	}
	var live []*client
	for tick := range 400 {
		for range rng.IntN(16) {
			switch op := rng.IntN(20); {
			case op < 5 || len(live) == 0:
				c := &client{}
				require.NoError(t, n.Connect(context.Background(), c, fmt.Sprintf("u%02d", rng.IntN(60)), []string{channels[rng.IntN(2)]}))
				live = append(live, c)
			case op < 10:
				i := rng.IntN(len(live))
				n.Disconnect(live[i])
				live = slices.Delete(live, i, i+1)
			case op < 13:
				require.NoError(t, n.Join(context.Background(), live[rng.IntN(len(live))], channels[rng.IntN(2)]))
			case op < 16:
				require.NoError(t, n.Leave(live[rng.IntN(len(live))], channels[rng.IntN(2)]))
			default: // a pager asks for its next page, mid-tick
				p := pagers[rng.IntN(len(pagers))]
				apply(p)
				if p.asked == 0 {
					require.NoError(t, n.SendMembers(p.c, p.ch, p.after, 1+rng.IntN(8)))
					p.asked++
				}
			}
		}
		n.Step()
		for _, p := range pagers {
			apply(p)
			if !p.complete || p.asked > 0 {
				continue
			}
			count, members, _, err := n.Members(context.Background(), p.ch, "", 1000)
			require.NoError(t, err)
			var believed []string
			for u := range p.view {
				believed = append(believed, u)
			}
			slices.Sort(believed)
			require.Equal(t, members, orEmpty(believed), "tick %d, %s's view of %s", tick, p.c.name, p.ch)
			require.Len(t, members, count)
		}
	}
	for _, p := range pagers {
		assert.True(t, p.complete, "%s paged to the end", p.c.name)
	}
}

// The page's frame is what the protocol says: the JSON of a MembersPage.
func TestPageFrameParses(t *testing.T) {
	n := newNode(t, Config{})
	alice := connect(t, n, "alice", "lobby")
	alice.take()
	require.NoError(t, n.SendMembers(alice, "lobby", "alice", 5))
	frames := alice.take()
	require.Len(t, frames, 1)
	var page struct {
		Type    string
		Count   int
		Members []string
		Next    *string
	}
	require.NoError(t, json.Unmarshal([]byte(frames[0]), &page))
	assert.Equal(t, "members", page.Type)
	assert.Equal(t, 1, page.Count)
	assert.Equal(t, []string{}, page.Members, "an empty page is an empty array")
	assert.Nil(t, page.Next, "no next on the last page")
}
