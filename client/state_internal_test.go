package client

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/presenced/presenced/protocol"
)

// TestChannelRules applies frames to a channel's state as the reader does
// and checks the members and away sets and Complete after each.
func TestChannelRules(t *testing.T) {
	type step struct {
		frame    protocol.Frame
		after    string // a page's request
		members  []string
		away     []string
		complete bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"snapshot then diffs", []step{
			{frame: &protocol.Joined{Count: 3, Members: []string{"a", "b", "c"}, Away: []string{"b"}}, members: []string{"a", "b", "c"}, away: []string{"b"}, complete: true},
			{frame: &protocol.Presence{Count: 3, Joins: []string{"d"}, Leaves: []string{"b"}, Away: []string{"d"}}, members: []string{"a", "c", "d"}, away: []string{"d"}, complete: true},
			{frame: &protocol.Presence{Count: 3, Active: []string{"d"}}, members: []string{"a", "c", "d"}, complete: true},
		}},
		{"cut snapshot, pages, diffs between", []step{
			{frame: &protocol.Joined{Count: 5, Members: []string{"a", "b"}}, members: []string{"a", "b"}},
			{frame: &protocol.MembersPage{Count: 5, Members: []string{"a", "b"}, Next: "b"}, members: []string{"a", "b"}},
			// c leaves and e joins between two pages: the next page is as of
			// this diff, so it has no c.
			{frame: &protocol.Presence{Count: 5, Joins: []string{"f"}, Leaves: []string{"c"}}, members: []string{"a", "b", "f"}},
			{frame: &protocol.MembersPage{Count: 5, Members: []string{"d", "e"}, Away: []string{"e"}, Next: "e"}, after: "b", members: []string{"a", "b", "d", "e", "f"}, away: []string{"e"}, complete: true},
			{frame: &protocol.MembersPage{Count: 5, Members: []string{"f"}}, after: "e", members: []string{"a", "b", "d", "e", "f"}, away: []string{"e"}, complete: true},
		}},
		{"a page drops those it no longer lists", []step{
			{frame: &protocol.Joined{Count: 4, Members: []string{"a", "b", "c", "d"}}, members: []string{"a", "b", "c", "d"}, complete: true},
			{frame: &protocol.Presence{Count: 3, CountOnly: true}, members: []string{"a", "b", "c", "d"}},
			{frame: &protocol.MembersPage{Count: 3, Members: []string{"a", "c"}, Next: "c"}, members: []string{"a", "c", "d"}},
			{frame: &protocol.MembersPage{Count: 3, Members: []string{"e"}}, after: "c", members: []string{"a", "c", "e"}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := newChanState()
			for i, s := range tc.steps {
				switch f := s.frame.(type) {
				case *protocol.Joined:
					st.snapshot(f, 1)
				case *protocol.Presence:
					st.diff(f)
				case *protocol.MembersPage:
					st.page(f, s.after)
				}
				got := st.export()
				assert.Equal(t, s.members, got.Members, "step %d members", i)
				assert.Equal(t, s.away, got.Away, "step %d away", i)
				assert.Equal(t, s.complete, got.Complete, "step %d complete", i)
			}
		})
	}
}
