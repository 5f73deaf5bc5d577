package client_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// TestReconnectAfterRestart: the server stops (close 1001) and a new one
// starts on the same address with other members; the Client keeps its
// last state while it cannot connect, then rebuilds every channel and
// watched user from the new server's snapshots: bob, who was in the lobby
// of the old server only, is gone.
func TestReconnectAfterRestart(t *testing.T) {
	old := startServer(t, realClock())
	old.connect(t, "bob", "lobby")
	var d dialer
	opts := fast("alice", "lobby")
	opts.Dialer = d.websocket()
	alice := dial(t, old, opts)
	ctx := ctxLong(t)
	require.NoError(t, alice.Join(ctx, "room-7"))
	require.NoError(t, alice.Watch(ctx, []string{"bob", "carol"}))
	assert.Equal(t, client.Active, alice.User("bob").State)
	assert.Equal(t, client.Offline, alice.User("carol").State)

	d.hold()
	old.stop()
	sc := nextState(t, alice, client.Waiting)
	assert.Equal(t, protocol.CloseGoingAway, sc.Code)
	nextState(t, alice, client.Connecting)
	assert.Equal(t, "alice,bob", members(alice, "lobby"), "the last state is kept until a snapshot replaces it")
	assert.Equal(t, client.Active, alice.User("bob").State)

	cfg := realClock()
	cfg.addr = old.addr
	s := startServer(t, cfg)
	s.connect(t, "carol", "lobby")
	d.release()
	nextState(t, alice, client.Live)
	assert.Equal(t, "alice,carol", members(alice, "lobby"), "bob left while the Client was away")
	assert.Equal(t, "alice", members(alice, "room-7"), "joined again")
	assert.Equal(t, client.UserState{State: client.Offline}, alice.User("bob"))
	assert.Equal(t, client.Active, alice.User("carol").State, "watched again")
	assert.Equal(t, []string{"alice"}, s.members(t, "room-7"))
	assert.Equal(t, int64(1), s.upgrades.Load())
}

// TestReconnectAfterIdleTimeout: a Client that went silent is closed with
// 4408 when the server's ring has stepped a timeout, and reconnects.
func TestReconnectAfterIdleTimeout(t *testing.T) {
	cfg := realClock()
	cfg.manual = true
	s := startServer(t, cfg)
	alice := dial(t, s, fast("alice", "lobby"))
	require.NoError(t, alice.Silence(ctxLong(t)))
	done := make(chan *client.StateChange, 1)
	go func() { done <- nextState(t, alice, client.Waiting) }()
	var sc *client.StateChange
	eventually(t, func() bool {
		s.step(1)
		select {
		case sc = <-done:
			return true
		default:
			return false
		}
	}, "closed for idling")
	assert.Equal(t, protocol.CloseIdleTimeout, sc.Code)
	nextState(t, alice, client.Live)
	assert.Equal(t, int64(2), s.upgrades.Load())
	assert.Equal(t, []string{"alice"}, s.members(t, "lobby"))
	assert.Equal(t, "alice", members(alice, "lobby"))
}

// TestReconnectAfterNetworkError: a connection cut without a close frame
// is redialed, and the away state set before goes out again on the new
// connection, after the joins (which make a connection active).
func TestReconnectAfterNetworkError(t *testing.T) {
	s := startServer(t, realClock())
	var d dialer
	opts := fast("bob", "lobby")
	opts.Dialer = d.websocket()
	bob := dial(t, s, opts)
	alice := dial(t, s, fast("alice", "lobby"))
	ctx := ctxLong(t)
	require.NoError(t, bob.SetActivity(ctx, true))
	eventually(t, func() bool { return len(alice.Channel("lobby").Away) == 1 }, "alice sees bob away")

	d.hold()
	d.cut()
	eventually(t, func() bool { return members(alice, "lobby") == "alice" }, "bob is gone while cut off")
	d.release()
	eventually(t, func() bool { return members(alice, "lobby") == "alice,bob" }, "bob is back")
	eventually(t, func() bool {
		return assert.ObjectsAreEqual([]string{"bob"}, alice.Channel("lobby").Away)
	}, "bob is away again after his reconnect")
	assert.Equal(t, int64(3), s.upgrades.Load())
}
