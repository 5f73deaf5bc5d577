package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// setServer answers pings, refuses a set of mode dnd with an error frame,
// answers a watch with a watching and then an error frame (as a server
// that refuses some of the IDs does), and sends each set frame it gets on
// sets. On its first connection, if cut is set, it drops the connection at
// the first set instead.
func setServer(t *testing.T, sets chan<- string, cut bool) *rogue {
	return startRogue(t, func(n int64, ws *websocket.Conn) {
		if sendWelcome(ws) != nil {
			return
		}
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			f, err := protocol.ParseClient(data)
			if err != nil {
				return
			}
			switch f := f.(type) {
			case protocol.Ping:
				err = send(ws, protocol.Pong{})
			case protocol.Watch:
				if err = send(ws, protocol.Watching{}); err == nil {
					err = send(ws, protocol.Error{Error: "not allowed to watch eve"})
				}
			case protocol.Set:
				sets <- string(data)
				if cut && n == 1 {
					return
				}
				if f.Mode == protocol.ModeDND {
					err = send(ws, protocol.Error{Error: `"mode" dnd is not for you`})
				}
			}
			if err != nil {
				return
			}
		}
	})
}

// TestSetTellsRefusals: Set returns nil when the server took the set and
// the server's error frame when it refused it, not an error frame that
// answered an earlier frame; it sends only the parts given, "note": null
// for a zero Note; and a record the server would refuse is not sent at
// all.
func TestSetTellsRefusals(t *testing.T) {
	sets := make(chan string, 10)
	c := dialRogue(t, setServer(t, sets, false), client.Options{UID: "alice"})
	ctx := ctxLong(t)

	// The error after the watching comes right after Watch returned: it
	// is not the set's.
	require.NoError(t, c.Watch(ctx, []string{"eve"}))
	require.NoError(t, c.Set(ctx, client.Record{Mode: protocol.ModeOnline, Note: &client.Note{}}))
	assert.Equal(t, `{"type":"set","mode":"online","note":null}`, <-sets)
	require.NoError(t, c.Set(ctx, client.Record{Note: &client.Note{}}))
	assert.Equal(t, `{"type":"set","note":null}`, <-sets)

	err := c.Set(ctx, client.Record{Mode: protocol.ModeDND})
	var se *client.ServerError
	require.True(t, errors.As(err, &se), "want a *client.ServerError, got %v", err)
	assert.Equal(t, `"mode" dnd is not for you`, se.Message)
	assert.Equal(t, `{"type":"set","mode":"dnd"}`, <-sets)
	assert.Equal(t, client.Record{}, record(t, c, "alice"), "a refused set changes nothing")

	require.ErrorIs(t, c.Set(ctx, client.Record{}), client.ErrInvalidRecord)
	require.ErrorIs(t, c.Set(ctx, client.Record{Mode: "busy"}), client.ErrInvalidRecord)
	require.ErrorIs(t, c.Set(ctx, client.Record{Note: &client.Note{Text: strings.Repeat("x", 129)}}), client.ErrInvalidRecord)

	note := &client.Note{Text: "hi", Until: time.Now().Add(time.Hour).UnixMilli()}
	require.NoError(t, c.Set(ctx, client.Record{Mode: protocol.ModeInvisible, Note: note}))
	raw := <-sets
	assert.Contains(t, raw, `"mode":"invisible","note":{"text":"hi","until":`, "the next set sent: not the ones refused here")
	assert.Equal(t, client.Record{Mode: protocol.ModeInvisible, Note: note}, record(t, c, "alice"))
	select {
	case s := <-sets:
		t.Errorf("sent: %s", s)
	default:
	}
	assert.Equal(t, client.Live, c.State())
}

// TestSetAgainAfterACut: a set whose connection is lost before the
// server's answer is sent again on the next connection.
func TestSetAgainAfterACut(t *testing.T) {
	sets := make(chan string, 10)
	c := dialRogue(t, setServer(t, sets, true), fast("alice"))
	ctx := ctxLong(t)
	require.NoError(t, c.Set(ctx, client.Record{Note: &client.Note{Emoji: "🎧"}}))
	assert.Equal(t, <-sets, <-sets, "the same set twice")
	assert.Equal(t, client.Record{Note: &client.Note{Emoji: "🎧"}}, record(t, c, "alice"))
}

// TestSetWaitsForTheAnswer: against a server that answers no ping, Set
// waits for its ctx.
func TestSetWaitsForTheAnswer(t *testing.T) {
	r := startRogue(t, func(_ int64, ws *websocket.Conn) {
		if sendWelcome(ws) == nil {
			_ = hold(ws)
		}
	})
	c := dialRogue(t, r, client.Options{UID: "alice"})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Set(ctx, client.Record{Mode: protocol.ModeDND}), context.DeadlineExceeded)
}

// badRecordFrames carry records that break the protocol: each frame is
// ignored whole.
var badRecordFrames = []string{
	`{"type":"presence","channel":"lobby","count":3,"joins":["carol"],"leaves":[],"users":{"eve":{"mode":"dnd"}}}`,
	`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"bob":{"mode":"busy"}}}`,
	`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"bob":{"info":[1]}}}`,
	`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"bob":{"info":{"x":"` + strings.Repeat("y", 600) + `"}}}}`,
	`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"bob":{"note":{"text":"` + strings.Repeat("y", 129) + `"}}}}`,
	`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"bob":{"note":{"emoji":"` + strings.Repeat("😀", 17) + `"}}}}`,
	`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"bob":{"note":{"text":"x","until":-5}}}}`,
	`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"bob":{"note":{}}}}`,
	`{"type":"presence","channel":"lobby","count":2,"updated":{"bob":{"mode":"dnd"}}}`,
	`{"type":"status","online":[],"offline":[],"updated":{"dave":{"mode":"busy"}}}`,
	`{"type":"status","online":["dave"],"offline":[],"users":{"eve":{}}}`,
}

// TestBadRecordsAreNotApplied: records that break the protocol (an unknown
// mode, info that is no object or too big, a note too long, empty or with
// a negative until, records of users the frame does not list, records in
// a count-only diff) fail the snapshot or watch answer that carries them,
// and make a diff or status frame ignored; the good records around them
// apply, normalized, and records of users the Client does not see are not
// kept.
func TestBadRecordsAreNotApplied(t *testing.T) {
	snapshots := map[string]string{
		"lobby":     `{"type":"joined","channel":"lobby","count":2,"members":["alice","bob"],"users":{"alice":{"mode":"dnd","note":{"text":"from the welcome"}},"bob":{"info":{"name":"Bob"}}}}`,
		"stray":     `{"type":"joined","channel":"stray","count":1,"members":["alice"],"users":{"eve":{"mode":"dnd"}}}`,
		"badmode":   `{"type":"joined","channel":"badmode","count":1,"members":["alice"],"users":{"alice":{"mode":"busy"}}}`,
		"notobject": `{"type":"joined","channel":"notobject","count":1,"members":["alice"],"users":{"alice":{"info":"Alice"}}}`,
	}
	r := startRogue(t, func(_ int64, ws *websocket.Conn) {
		if send(ws, protocol.Welcome{UID: "alice", TimeoutMS: 10_000, Mode: "dnd", Note: &protocol.Note{Text: "from the welcome"}}) != nil {
			return
		}
		raw := func(s string) { _ = ws.WriteMessage(websocket.TextMessage, []byte(s)) }
		for {
			f, err := recv(ws)
			if err != nil {
				return
			}
			switch f := f.(type) {
			case protocol.Join:
				raw(snapshots[f.Channel])
			case protocol.Watch:
				if f.UIDs[0] == "mallory" {
					raw(`{"type":"watching","online":["mallory"],"users":{"mallory":{"note":{"text":""}}}}`)
					continue
				}
				raw(`{"type":"watching","online":["dave"],"users":{"dave":{"mode":"dnd"}}}`)
				for _, s := range badRecordFrames {
					raw(s)
				}
				raw(`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"bob":{"mode":"online","info":{ "name" : "Bob" }},"zed":{"mode":"dnd"}}}`)
				raw(`{"type":"status","online":[],"offline":[],"updated":{"dave":{"note":{"emoji":"🎧"}},"mallory":{"mode":"dnd"}}}`)
				_ = marker(ws)
			}
		}
	})
	c := dialRogue(t, r, client.Options{UID: "alice"})
	ctx := ctxLong(t)
	assert.Equal(t, client.Record{Mode: protocol.ModeDND, Note: &client.Note{Text: "from the welcome"}}, record(t, c, "alice"))
	require.NoError(t, c.Join(ctx, "lobby"))
	assert.Equal(t, client.Record{Info: []byte(`{"name":"Bob"}`)}, record(t, c, "bob"))
	for _, ch := range []string{"stray", "badmode", "notobject"} {
		err := c.Join(ctx, ch)
		require.ErrorIs(t, err, client.ErrProtocol, ch)
		t.Logf("join %s: %v", ch, err)
		assert.Equal(t, client.ChannelState{}, c.Channel(ch), ch)
	}
	err := c.Watch(ctx, []string{"mallory"})
	require.ErrorIs(t, err, client.ErrProtocol)
	t.Logf("watch: %v", err)
	_, ok := c.Record("mallory")
	assert.False(t, ok)

	require.NoError(t, c.Watch(ctx, []string{"dave"}))
	var types []string
	var diff *protocol.Presence
	var st *protocol.Status
	for _, ev := range untilMarker(t, c) {
		types = append(types, ev.Type())
		switch f := ev.(type) {
		case *protocol.Presence:
			diff = f
		case *protocol.Status:
			st = f
		}
	}
	assert.Equal(t, []string{"welcome", "state", "joined", "watching", "presence", "status"}, types)
	assert.Equal(t, map[string]client.Record{"bob": {Info: []byte(`{"name":"Bob"}`)}, "zed": {Mode: protocol.ModeDND}}, diff.Updated,
		"the event's records as the Client keeps them")
	assert.Equal(t, &protocol.Status{Updated: map[string]client.Record{"dave": {Note: &client.Note{Emoji: "🎧"}}}}, st,
		"cut to the watched users")
	assert.Equal(t, client.Record{Info: []byte(`{"name":"Bob"}`)}, record(t, c, "bob"))
	assert.Equal(t, client.Record{Note: &client.Note{Emoji: "🎧"}}, record(t, c, "dave"))
	for _, uid := range []string{"carol", "eve", "zed", "mallory"} {
		_, ok := c.Record(uid)
		assert.False(t, ok, uid)
	}
	assert.Equal(t, client.ChannelState{Count: 2, Members: []string{"alice", "bob"}, Complete: true}, c.Channel("lobby"))
	assert.Equal(t, client.Record{Mode: protocol.ModeDND, Note: &client.Note{Text: "from the welcome"}}, record(t, c, "alice"))
	assert.Equal(t, client.Live, c.State())
}

// TestRecordLeavesOutANoteRunOut: a note whose until passed, as a server
// may still send until its clear goes out, is not in Record, while the
// snapshot event carries it as sent.
func TestRecordLeavesOutANoteRunOut(t *testing.T) {
	past := time.Now().Add(-time.Minute).UnixMilli()
	r := startRogue(t, func(_ int64, ws *websocket.Conn) {
		if sendWelcome(ws) != nil {
			return
		}
		for {
			f, err := recv(ws)
			if err != nil {
				return
			}
			if j, ok := f.(protocol.Join); ok {
				_ = send(ws, protocol.Joined{Channel: j.Channel, Count: 2, Members: []string{"alice", "bob"},
					Users: map[string]protocol.Record{"bob": {Mode: protocol.ModeDND, Note: &protocol.Note{Text: "back at 3", Until: past}}}})
			}
		}
	})
	c := dialRogue(t, r, client.Options{UID: "alice", Channels: []string{"lobby"}})
	assert.Equal(t, client.Record{Mode: protocol.ModeDND}, record(t, c, "bob"))
	j := waitFor(t, c, func(*protocol.Joined) bool { return true })
	assert.Equal(t, past, j.Users["bob"].Note.Until)
}
