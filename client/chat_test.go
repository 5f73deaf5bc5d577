package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
)

// TestAwayTypingLastSeen: what a chat UI shows, from the Client's state:
// who is away in a channel and among the watched users, who types, and
// when a watched user was last seen.
func TestAwayTypingLastSeen(t *testing.T) {
	cfg := realClock()
	cfg.presence.TypingTTL = 200 * time.Millisecond
	s := startServer(t, cfg)
	ctx := ctxLong(t)
	alice := dial(t, s, fast("alice", "lobby"))
	bob := dial(t, s, fast("bob", "lobby"))
	carol := dial(t, s, fast("carol", "lobby"))
	require.NoError(t, alice.Watch(ctx, []string{"carol", "dave"}))
	assert.Equal(t, client.UserState{State: client.Active}, alice.User("carol"))
	assert.Equal(t, client.UserState{State: client.Offline}, alice.User("dave"), "watched, never seen")
	assert.Equal(t, client.UserState{}, alice.User("bob"), "not watched")

	require.NoError(t, carol.SetActivity(ctx, true))
	eventually(t, func() bool {
		return alice.User("carol").State == client.Away && assert.ObjectsAreEqual([]string{"carol"}, alice.Channel("lobby").Away)
	}, "carol away, as a watched user and in the lobby")
	require.NoError(t, carol.SetActivity(ctx, false))
	eventually(t, func() bool {
		return alice.User("carol").State == client.Active && len(alice.Channel("lobby").Away) == 0
	}, "carol active again")

	require.NoError(t, bob.Typing(ctx, "lobby"))
	eventually(t, func() bool {
		st := alice.Channel("lobby")
		return assert.ObjectsAreEqual([]string{"bob"}, st.Typing) && st.TypingCount == 0
	}, "bob types")
	eventually(t, func() bool { return len(alice.Channel("lobby").Typing) == 0 }, "bob stopped typing after the TTL")
	require.NoError(t, bob.SetActivity(ctx, true))
	eventually(t, func() bool { return len(alice.Channel("lobby").Away) == 1 }, "bob away")
	require.NoError(t, bob.Typing(ctx, "lobby"))
	eventually(t, func() bool { return len(alice.Channel("lobby").Away) == 0 }, "typing made bob active")

	before := time.Now().Truncate(time.Millisecond)
	require.NoError(t, carol.Close())
	eventually(t, func() bool { return alice.User("carol").State == client.Offline }, "carol offline")
	seen := alice.User("carol").LastSeen
	assert.False(t, seen.Before(before), "last seen %v, closed after %v", seen, before)
	assert.False(t, seen.After(time.Now()))
	assert.Equal(t, "alice,bob", members(alice, "lobby"))

	// A new watch list rebuilds the watched users from its answer.
	require.NoError(t, alice.Watch(ctx, []string{"bob"}))
	assert.Equal(t, client.UserState{State: client.Active}, alice.User("bob"))
	assert.Equal(t, client.UserState{}, alice.User("carol"))
}
