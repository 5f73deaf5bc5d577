package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// badFrames contradict themselves, the protocol, or what the Client
// asked: none may change the state or reach Events.
var badFrames = []string{
	`{"type":"presence","channel":"lobby","count":-7,"joins":["eve"],"leaves":[]}`,
	`{"type":"presence","channel":"lobby","count":-7}`,
	`{"type":"presence","channel":"lobby","count":2000000000,"joins":["eve"],"leaves":[]}`,
	`{"type":"presence","channel":"other","count":1,"joins":["eve"],"leaves":[]}`,
	`{"type":"typing","channel":"other","users":["eve"]}`,
	`{"type":"typing","channel":"lobby","users":["eve"],"count":-1}`,
	`{"type":"typing","channel":"lobby","users":["u0","u1","u2","u3","u4","u5","u6","u7","u8","u9","u10"]}`,
	`{"type":"members","channel":"lobby","count":3,"members":["eve"]}`,
	`{"type":"joined","channel":"other","count":1,"members":["eve"]}`,
	`{"type":"joined","channel":"lobby","count":1,"members":["eve"]}`,
	`{"type":"watching","online":["mallory"]}`,
	`{"type":"status","online":["mallory"],"offline":[],"last_seen":{"mallory":1}}`,
}

// TestBadFramesAreNotApplied: a server that sends negative and absurd
// counts, frames about channels the Client did not join, snapshots, pages
// and watch answers nobody asked for, status about users nobody watches,
// and snapshots that contradict themselves in answer to joins: none of it
// changes the state or reaches Events, the connection stays, and the good
// frames around them still apply (a status is cut to the watched users).
func TestBadFramesAreNotApplied(t *testing.T) {
	snapshots := map[string]protocol.Joined{
		"lobby":    {Channel: "lobby", Count: 2, Members: []string{"alice", "bob"}},
		"negative": {Channel: "negative", Count: -1},
		"unsorted": {Channel: "unsorted", Count: 2, Members: []string{"bob", "alice"}},
		"repeated": {Channel: "repeated", Count: 2, Members: []string{"bob", "bob"}},
		"overfull": {Channel: "overfull", Count: 1, Members: []string{"alice", "bob"}},
		"stranger": {Channel: "stranger", Count: 1, Members: []string{"alice"}, Away: []string{"eve"}},
	}
	r := startRogue(t, func(_ int64, ws *websocket.Conn) {
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
				_ = send(ws, snapshots[f.Channel])
			case protocol.Watch:
				_ = send(ws, protocol.Watching{Online: []string{"bob"}})
				for _, raw := range badFrames {
					_ = ws.WriteMessage(websocket.TextMessage, []byte(raw))
				}
				// Good ones: bob goes offline (a last seen before 1970 is
				// none), carol joins.
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"status","online":["mallory"],"offline":["bob"],"last_seen":{"bob":-5,"mallory":1}}`))
				_ = send(ws, protocol.Presence{Channel: "lobby", Count: 3, Joins: []string{"carol"}})
				_ = marker(ws)
			}
		}
	})
	c := dialRogue(t, r, client.Options{UID: "alice", Channels: []string{"lobby"}})
	ctx := ctxLong(t)
	for _, ch := range []string{"negative", "unsorted", "repeated", "overfull", "stranger"} {
		err := c.Join(ctx, ch)
		require.ErrorIs(t, err, client.ErrProtocol, ch)
		t.Logf("join %s: %v", ch, err)
		assert.Equal(t, client.ChannelState{}, c.Channel(ch), ch)
	}
	require.NoError(t, c.Watch(ctx, []string{"bob"}))
	var types []string
	var st *protocol.Status
	for _, ev := range untilMarker(t, c) {
		types = append(types, ev.Type())
		if s, ok := ev.(*protocol.Status); ok {
			st = s
		}
	}
	assert.Equal(t, []string{"welcome", "joined", "state", "watching", "status", "presence"}, types)
	assert.Equal(t, &protocol.Status{Offline: []string{"bob"}}, st, "cut to the watched users")
	assert.Equal(t, client.ChannelState{Count: 3, Members: []string{"alice", "bob", "carol"}, Complete: true}, c.Channel("lobby"))
	assert.Equal(t, client.ChannelState{}, c.Channel("other"))
	assert.Equal(t, client.UserState{State: client.Offline}, c.User("bob"))
	assert.Equal(t, client.UserState{}, c.User("mallory"))
	assert.Equal(t, client.Live, c.State())
	assert.Equal(t, int64(1), r.upgrades.Load(), "the connection stayed")
}

// TestSecondWelcomeDropsTheConnection: a welcome on a connection that had
// one is a server that lost track of its session: the Client closes the
// connection with 1002 and reconnects.
func TestSecondWelcomeDropsTheConnection(t *testing.T) {
	closed := make(chan error, 1)
	r := startRogue(t, func(n int64, ws *websocket.Conn) {
		if sendWelcome(ws) != nil {
			return
		}
		if n == 1 {
			if sendWelcome(ws) != nil {
				return
			}
			closed <- hold(ws)
			return
		}
		_ = hold(ws)
	})
	c := dialRogue(t, r, fast("alice"))
	sc := nextState(t, c, client.Waiting)
	assert.ErrorIs(t, sc.Err, client.ErrProtocol)
	select {
	case err := <-closed:
		assert.True(t, websocket.IsCloseError(err, websocket.CloseProtocolError), "close 1002, got %v", err)
	case <-time.After(waitLong):
		t.Fatal("the first connection was not closed")
	}
	nextState(t, c, client.Live)
	assert.Equal(t, int64(2), r.upgrades.Load())
}

// TestFirstFrameMustBeAWelcome: a server whose first frame is anything
// else is retried until Dial's ctx ends, and Dial says why.
func TestFirstFrameMustBeAWelcome(t *testing.T) {
	r := startRogue(t, func(_ int64, ws *websocket.Conn) {
		if send(ws, protocol.Joined{Channel: "lobby", Count: 1, Members: []string{"alice"}}) == nil {
			_ = hold(ws)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := client.Dial(ctx, r.url, fast("alice"))
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, errors.Is(err, client.ErrProtocol), "says why the attempts failed: %v", err)
	assert.Greater(t, r.upgrades.Load(), int64(1), "retried")
}
