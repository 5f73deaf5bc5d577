package client_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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

// next reads c's next event, failing the test if none comes in time.
func next(t *testing.T, c *client.Client) protocol.Frame {
	t.Helper()
	select {
	case ev, ok := <-c.Events():
		require.True(t, ok, "events closed")
		return ev
	case <-time.After(waitLong):
		t.Fatalf("no event within %s", waitLong)
		return nil
	}
}

// waiting waits until c's reader holds a data event that found Events
// full, and waits for the application: the socket is not read meanwhile.
func waiting(t *testing.T, c *client.Client) {
	t.Helper()
	eventually(t, func() bool { return c.Held() > 0 && c.State() == client.Live }, "the reader waits for room in Events")
}

// TestDataEventsAreNeverDropped: an application that reads no events
// while 2,000 chats come, then reads them all, gets every one in order,
// then the publishes and the message sent after them, and its own chat
// sent while its reader was waiting; no notice overtakes a chat, the
// state is exact, and the connection was never dropped.
func TestDataEventsAreNeverDropped(t *testing.T) {
	const chats = 2000
	s := startServer(t, realClock())
	bob := s.connect(t, "bob", "lobby")
	alice := dial(t, s, fast("alice", "lobby"))
	ctx := ctxLong(t)
	require.NoError(t, alice.Watch(ctx, []string{"dave"}))
	for i := range chats {
		require.NoError(t, s.node.Chat(ctx, bob, "lobby", strconv.Itoa(i)))
		if i == chats/2-1 {
			s.connect(t, "carol", "lobby")
			s.connect(t, "dave")
		}
	}
	for i := range 3 {
		require.NoError(t, s.hub.Publish(ctx, "lobby", json.RawMessage(strconv.Itoa(i))))
	}
	require.NoError(t, s.hub.Send(ctx, "alice", json.RawMessage(`"dm"`)))
	waiting(t, alice)
	assert.Equal(t, "alice,bob", members(alice, "lobby"), "state reads work while the reader waits; the state is as of the last frame read")
	require.NoError(t, alice.Chat(ctx, "lobby", "mine"), "calls that await no answer work too")

	var got []string // the data events, in order
	seen := 0        // bob's chats read so far
	for len(got) == 0 || got[len(got)-1] != "chat alice mine" {
		switch f := next(t, alice).(type) {
		case *protocol.Chat:
			if f.From == "bob" {
				require.Equal(t, strconv.Itoa(seen), f.Text, "bob's chats in order, none missing")
				seen++
			}
			got = append(got, "chat "+f.From+" "+f.Text)
		case *protocol.Publish:
			got = append(got, "publish "+string(f.Data))
		case *protocol.Message:
			got = append(got, "message "+string(f.Data))
		case *protocol.Presence:
			if strings.Contains(strings.Join(f.Joins, ","), "carol") {
				assert.GreaterOrEqual(t, seen, chats/2, "carol's join came after the first half of the chats")
			}
		case *protocol.Status:
			assert.GreaterOrEqual(t, seen, chats/2, "dave came online after the first half of the chats")
		}
	}
	assert.Equal(t, chats, seen)
	assert.Equal(t, []string{"publish 0", "publish 1", "publish 2", `message "dm"`, "chat alice mine"}, got[chats:])
	assert.Equal(t, "alice,bob,carol", members(alice, "lobby"))
	assert.Equal(t, 3, alice.Channel("lobby").Count)
	assert.Equal(t, client.Active, alice.User("dave").State)
	assert.Equal(t, int64(1), s.upgrades.Load(), "never reconnected")
	t.Logf("notices dropped: %d", alice.Dropped())
}

// TestCloseWhileTheReaderWaits: Close returns at once while the reader
// waits for room for a data event, and closes Events.
func TestCloseWhileTheReaderWaits(t *testing.T) {
	s := startServer(t, realClock())
	opts := fast("alice", "lobby")
	opts.EventBuffer = 4
	alice := dial(t, s, opts)
	ctx := ctxLong(t)
	for i := range 50 {
		require.NoError(t, s.hub.Publish(ctx, "lobby", json.RawMessage(strconv.Itoa(i))))
	}
	waiting(t, alice)
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- alice.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(waitLong):
		t.Fatal("Close blocked behind the waiting reader")
	}
	t.Logf("Close took %s", time.Since(start))
	evs := drain(t, alice)
	assert.LessOrEqual(t, len(evs), 4+1, "what the buffer held, then the closed state if it had room")
	assert.ErrorIs(t, alice.Err(), client.ErrClosed)
}

// TestFullEventsDropNoticesNotData: with Events full and nobody reading,
// presence notices are dropped while the state follows them and calls are
// answered; a data event then waits, and comes after the ones before it.
func TestFullEventsDropNoticesNotData(t *testing.T) {
	s := startServer(t, realClock())
	opts := fast("alice", "lobby")
	opts.EventBuffer = 8
	alice := dial(t, s, opts)
	ctx := ctxLong(t)
	n := 0 // publishes made
	for len(alice.Events()) < cap(alice.Events()) {
		before := len(alice.Events())
		require.NoError(t, s.hub.Publish(ctx, "lobby", json.RawMessage(strconv.Itoa(n))))
		n++
		eventually(t, func() bool { return len(alice.Events()) > before }, "publish %d in the buffer", n-1)
	}
	require.Zero(t, alice.Held(), "the buffer is full of events, none waits")
	for _, uid := range []string{"bob", "carol", "dave"} {
		s.connect(t, uid, "lobby")
	}
	eventually(t, func() bool { return members(alice, "lobby") == "alice,bob,carol,dave" }, "the state follows")
	eventually(t, func() bool { return alice.Dropped() > 0 }, "presence notices dropped")
	require.NoError(t, alice.Join(ctx, "room-7"), "calls are answered")
	require.NoError(t, s.hub.Send(ctx, "alice", json.RawMessage(`"dm"`)))
	waiting(t, alice)
	dropped := alice.Dropped()

	var publishes []string
	for {
		ev := next(t, alice)
		if p, ok := ev.(*protocol.Publish); ok {
			publishes = append(publishes, string(p.Data))
		}
		if m, ok := ev.(*protocol.Message); ok {
			assert.Equal(t, `"dm"`, string(m.Data))
			break
		}
		assert.NotEqual(t, "presence", ev.Type(), "the diffs were dropped")
	}
	want := make([]string, n)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	assert.Equal(t, want, publishes, "every publish, in order, before the message")
	assert.Equal(t, 4, alice.Channel("lobby").Count)
	assert.Equal(t, dropped, alice.Dropped(), "nothing dropped since the message waited")
}

// scripted starts a WebSocket server that sends the welcome with timeoutMS
// and then runs script on each connection; it returns the server's URL.
func scripted(t *testing.T, timeoutMS int64, script func(ws *websocket.Conn)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		welcome := protocol.MustEncode(protocol.Welcome{UID: "alice", TimeoutMS: timeoutMS}).Data
		if ws.WriteMessage(websocket.TextMessage, welcome) == nil {
			script(ws)
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
}

// serve answers app pings with pongs and joins with joined (after the
// frames before), counting the pings, until the connection ends.
func serve(ws *websocket.Conn, pings *atomic.Int64, before ...protocol.Frame) {
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			return
		}
		var out []protocol.Frame
		switch f, _ := protocol.ParseClient(msg); f := f.(type) {
		case protocol.Ping:
			pings.Add(1)
			out = []protocol.Frame{protocol.Pong{}}
		case protocol.Join:
			out = append(slices.Clone(before), protocol.Joined{Channel: f.Channel, Count: 1, Members: []string{"alice"}})
		}
		for _, f := range out {
			if ws.WriteMessage(websocket.TextMessage, protocol.MustEncode(f).Data) != nil {
				return
			}
		}
	}
}

// TestDataBeforeLiveDoesNotHoldUpDial: data events that come before the
// joins are answered, more than Events holds, do not keep Dial from
// returning (nobody can read them yet); they come, in order, after.
func TestDataBeforeLiveDoesNotHoldUpDial(t *testing.T) {
	var before []protocol.Frame
	for i := range 40 {
		before = append(before, protocol.Message{Data: json.RawMessage(strconv.Itoa(i))})
	}
	var pings atomic.Int64
	url := scripted(t, 30000, func(ws *websocket.Conn) { serve(ws, &pings, before...) })
	alice, err := client.Dial(ctxLong(t), url, client.Options{UID: "alice", Channels: []string{"lobby"}, EventBuffer: 4})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, alice.Close()) })
	assert.Equal(t, "alice", members(alice, "lobby"))
	for i := 0; i < 40; {
		if m, ok := next(t, alice).(*protocol.Message); ok {
			require.Equal(t, strconv.Itoa(i), string(m.Data))
			i++
		}
	}
	eventually(t, func() bool { return alice.Held() == 0 }, "nothing held")
}

// TestSlowReaderKeepsItsConnection: while the reader waits for the
// application, the Client does not take the server for silent, however
// long the wait: its read deadline runs only while it reads. Here the
// wait outlasts the read timeout (200 ms) many times over, counted in the
// app pings (every 33 ms) the server gets meanwhile.
func TestSlowReaderKeepsItsConnection(t *testing.T) {
	client.SetMinReadTimeout(t, 200*time.Millisecond)
	var conns, pings atomic.Int64
	url := scripted(t, 100, func(ws *websocket.Conn) {
		conns.Add(1)
		for i := range 10 {
			chat := protocol.Chat{Channel: "lobby", From: "bob", Text: fmt.Sprint(i)}
			if ws.WriteMessage(websocket.TextMessage, protocol.MustEncode(chat).Data) != nil {
				return
			}
		}
		serve(ws, &pings)
	})
	alice, err := client.Dial(ctxLong(t), url, client.Options{UID: "alice", EventBuffer: 2})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, alice.Close()) })
	waiting(t, alice)
	from := pings.Load()
	eventually(t, func() bool { return pings.Load() >= from+30 }, "30 app pings while the reader waits")
	assert.Equal(t, client.Live, alice.State())
	for i := 0; i < 10; {
		if c, ok := next(t, alice).(*protocol.Chat); ok {
			require.Equal(t, strconv.Itoa(i), c.Text)
			i++
		}
	}
	assert.Equal(t, int64(1), conns.Load(), "the same connection throughout")
	assert.Equal(t, client.Live, alice.State())
}
