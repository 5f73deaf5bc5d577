package client_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// TestDialJoinChat: Dial returns live with the snapshots of its channels;
// joins, leaves, chats and diffs show in the state and as typed events.
func TestDialJoinChat(t *testing.T) {
	s := startServer(t, realClock())
	s.connect(t, "bob", "lobby")
	alice := dial(t, s, fast("alice", "lobby"))
	assert.Equal(t, client.Live, alice.State())
	assert.Equal(t, client.ChannelState{Count: 2, Members: []string{"alice", "bob"}, Complete: true}, alice.Channel("lobby"))

	ctx := ctxLong(t)
	require.NoError(t, alice.Join(ctx, "room-7"))
	assert.Equal(t, []string{"alice"}, alice.Channel("room-7").Members)
	carol := s.connect(t, "carol", "room-7")
	eventually(t, func() bool { return members(alice, "room-7") == "alice,carol" }, "carol joins room-7")
	s.disconnect(carol)
	eventually(t, func() bool { return members(alice, "room-7") == "alice" }, "carol leaves room-7")

	require.NoError(t, alice.Chat(ctx, "room-7", "hi"))
	var seen []string
	for ev := range alice.Events() {
		seen = append(seen, ev.Type())
		if c, ok := ev.(*protocol.Chat); ok {
			assert.Equal(t, protocol.Chat{Channel: "room-7", From: "alice", Text: "hi"}, *c)
			break
		}
	}
	assert.Equal(t, []string{"welcome", "joined", "state", "joined", "presence", "presence", "chat"}, seen, "events in order")

	require.NoError(t, alice.Leave(ctx, "room-7"))
	assert.Equal(t, client.ChannelState{}, alice.Channel("room-7"), "a channel left has no state")
	assert.ErrorContains(t, alice.Chat(ctx, "room-7", "hi"), "not joined")
}

// TestDialErrors: a bad URL, a refused handshake and a ctx that ends fail
// Dial, with errors that say which.
func TestDialErrors(t *testing.T) {
	s := startServer(t, realClock())
	ln := closedPort(t)
	cases := []struct {
		name   string
		url    string
		opts   client.Options
		status int
		ctxErr bool
	}{
		{name: "bad scheme", url: "ftp://" + s.addr + "/ws", opts: fast("alice")},
		{name: "no host", url: "ws:///ws", opts: fast("alice")},
		{name: "bad uid", url: s.url(), opts: fast("no spaces"), status: http.StatusBadRequest},
		{name: "no uid", url: s.url(), opts: client.Options{}, status: http.StatusBadRequest},
		{name: "not found", url: "ws://" + s.addr + "/nope", opts: fast("alice"), status: http.StatusNotFound},
		{name: "nobody listens", url: "ws://" + ln + "/ws", opts: fast("alice"), ctxErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			if tc.ctxErr {
				ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
			}
			defer cancel()
			c, err := client.Dial(ctx, tc.url, tc.opts)
			require.Error(t, err)
			assert.Nil(t, c)
			switch {
			case tc.status != 0:
				assert.Equal(t, tc.status, closeErr(t, err).Status)
			case tc.ctxErr:
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.ErrorContains(t, err, "connection refused", "says why the attempts failed")
			default:
				assert.ErrorContains(t, err, "bad URL")
			}
		})
	}
}

// TestDialRefusedChannel: a channel of Options.Channels the server refuses
// fails Dial.
func TestDialRefusedChannel(t *testing.T) {
	s := startServer(t, realClock())
	_, err := client.Dial(ctxLong(t), s.url(), fast("alice", "lobby", "x/../"+string(make([]byte, 200))))
	require.ErrorIs(t, err, protocol.ErrInvalidChannel, "checked before dialing")
}

// TestCloseTwice: Close stops the Client, closes Events, and may be
// called again; calls then fail with ErrClosed.
func TestCloseTwice(t *testing.T) {
	s := startServer(t, realClock())
	c, err := client.Dial(ctxLong(t), s.url(), fast("alice", "lobby"))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	assert.ErrorIs(t, c.Err(), client.ErrClosed)
	assert.ErrorIs(t, c.Join(ctxLong(t), "x"), client.ErrClosed)
	evs := drain(t, c)
	require.NotEmpty(t, evs)
	assert.Equal(t, &client.StateChange{State: client.Closed, Err: client.ErrClosed}, evs[len(evs)-1])
	eventually(t, func() bool { return len(s.members(t, "lobby")) == 0 }, "alice gone from the lobby")
}
