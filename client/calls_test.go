package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
)

// A ChannelState holds what the protocol said and nothing else: empty lists
// are nil, and TypingCount is set only when the server names some typists.
func TestChannelStateShape(t *testing.T) {
	cfg := realClock()
	cfg.presence.TypingTTL = 200 * time.Millisecond
	s := startServer(t, cfg)
	alice := dial(t, s, fast("alice", "lobby"))
	bob := dial(t, s, fast("bob", "lobby"))
	eventually(t, func() bool { return alice.Channel("lobby").Count == 2 }, "bob joined")
	require.NoError(t, bob.Typing(ctxLong(t), "lobby"))
	eventually(t, func() bool { return len(alice.Channel("lobby").Typing) == 1 }, "bob typing")
	assert.Equal(t, client.ChannelState{Count: 2, Members: []string{"alice", "bob"}, Typing: []string{"bob"}, Complete: true},
		alice.Channel("lobby"))
	eventually(t, func() bool { return len(alice.Channel("lobby").Typing) == 0 }, "typing ended")
	assert.Equal(t, client.ChannelState{Count: 2, Members: []string{"alice", "bob"}, Complete: true}, alice.Channel("lobby"))
}

// A Leave after a Join whose ctx ended leaves the channel, whether or not
// that join went out: the server holds no membership, the Client no state.
func TestLeaveAfterAnAbandonedJoin(t *testing.T) {
	s := startServer(t, realClock())
	alice := dial(t, s, fast("alice"))
	for i := range 25 { // 75 frames: within the burst of the frame rate limit
		ch := fmt.Sprintf("room-%d", i)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = alice.Join(ctx, ch)
		require.NoError(t, alice.Leave(ctxLong(t), ch))
		require.NoError(t, alice.Watch(ctxLong(t), nil)) // answered after every frame sent before it
		assert.Empty(t, s.members(t, ch), ch)
		assert.Equal(t, client.ChannelState{}, alice.Channel(ch), ch)
	}
}
