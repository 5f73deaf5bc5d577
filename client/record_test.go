package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// waitFor reads c's events until one of type T that ok accepts, and
// returns it.
func waitFor[T protocol.Frame](t *testing.T, c *client.Client, ok func(T) bool) T {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case ev, open := <-c.Events():
			require.True(t, open, "events closed")
			if f, is := ev.(T); is && ok(f) {
				return f
			}
		case <-timeout:
			var zero T
			t.Fatalf("no %T event as awaited within %s", zero, waitLong)
		}
	}
}

// record returns c's record of uid, failing the test if it has none.
func record(t *testing.T, c *client.Client, uid string) client.Record {
	t.Helper()
	r, ok := c.Record(uid)
	require.True(t, ok, "a record of %s", uid)
	return r
}

func hasRecord(c *client.Client, uid string, want client.Record) bool {
	r, ok := c.Record(uid)
	return ok && r.Equal(want)
}

// TestSetReachesTheChannel: a set reaches the members of the user's
// channels in the next diff and in the snapshots after it; Set returns with
// the user's own record as set; each set replaces mode and note as a
// whole; and a Client forgets the records of the users it stops seeing.
func TestSetReachesTheChannel(t *testing.T) {
	s := startServer(t, realClock())
	alice := dial(t, s, fast("alice", "lobby"))
	bob := dial(t, s, fast("bob", "lobby", "room"))
	ctx := ctxLong(t)
	assert.Equal(t, client.Record{}, record(t, alice, "alice"), "its own user, from the welcome")
	assert.Equal(t, client.Record{}, record(t, bob, "alice"), "a member with no record")

	note := &client.Note{Text: "In a meeting", Emoji: "📅", Until: time.Now().Add(time.Hour).UnixMilli()}
	dnd := client.Record{Mode: protocol.ModeDND, Note: note}
	require.NoError(t, alice.Set(ctx, dnd))
	assert.Equal(t, dnd, record(t, alice, "alice"), "its own record as set, once Set returned")
	p := waitFor(t, bob, func(p *protocol.Presence) bool { _, ok := p.Updated["alice"]; return ok })
	assert.Equal(t, dnd, p.Updated["alice"], "the diff event carries the whole new record")
	assert.Equal(t, dnd, record(t, bob, "alice"))

	carol := dial(t, s, fast("carol", "lobby"))
	assert.Equal(t, dnd, record(t, carol, "alice"), "from the snapshot")
	p = waitFor(t, bob, func(p *protocol.Presence) bool { return len(p.Joins) > 0 })
	assert.Equal(t, []string{"carol"}, p.Joins)
	assert.Empty(t, p.Users, "carol has no record")
	assert.Equal(t, client.Record{}, record(t, bob, "carol"))

	// A part left out is kept, as with the set frame and the JavaScript
	// client: invisible, then back to online, keeps the note; a zero Note
	// clears it and keeps the mode.
	require.NoError(t, alice.Set(ctx, client.Record{Mode: protocol.ModeInvisible}))
	eventually(t, func() bool { _, ok := carol.Record("alice"); return !ok }, "alice invisible to carol")
	require.NoError(t, alice.Set(ctx, client.Record{Mode: protocol.ModeOnline}))
	kept := client.Record{Note: note}
	assert.Equal(t, kept, record(t, alice, "alice"), "its own: online, the note kept")
	eventually(t, func() bool { return hasRecord(carol, "alice", kept) }, "online again with the note kept")
	require.NoError(t, alice.Set(ctx, client.Record{Mode: protocol.ModeDND}))
	eventually(t, func() bool { return hasRecord(carol, "alice", dnd) }, "mode alone: the note kept")
	require.NoError(t, alice.Set(ctx, client.Record{Note: &client.Note{}}))
	assert.Equal(t, client.Record{Mode: protocol.ModeDND}, record(t, alice, "alice"), "its own: the note cleared, the mode kept")
	eventually(t, func() bool { return hasRecord(carol, "alice", client.Record{Mode: protocol.ModeDND}) }, "the note cleared, the mode kept")
	require.NoError(t, alice.Set(ctx, client.Record{Mode: protocol.ModeOnline}))
	eventually(t, func() bool {
		return hasRecord(carol, "alice", client.Record{}) && hasRecord(bob, "alice", client.Record{})
	},
		"alice back to no record")
	require.NoError(t, alice.Set(ctx, client.Record{Note: &client.Note{Emoji: "🌴"}}))
	eventually(t, func() bool { return hasRecord(alice, "alice", client.Record{Note: &client.Note{Emoji: "🌴"}}) }, "its own")
	eventually(t, func() bool { return hasRecord(bob, "alice", client.Record{Note: &client.Note{Emoji: "🌴"}}) }, "bob hears of it")

	require.NoError(t, bob.Leave(ctx, "lobby"))
	_, ok := bob.Record("alice")
	assert.False(t, ok, "forgotten with the channel")
	_, ok = bob.Record("carol")
	assert.False(t, ok)
	assert.Equal(t, client.Record{}, record(t, bob, "bob"), "its own stays")

	require.NoError(t, carol.Close())
	eventually(t, func() bool { _, ok := alice.Record("carol"); return !ok }, "carol forgotten once she left")
	_, ok = alice.Record("nobody")
	assert.False(t, ok)
}

// TestSetAnExpiringNote: a note whose until passed is gone from Record at
// once, and the server's clear reaches the others as an update.
func TestSetAnExpiringNote(t *testing.T) {
	s := startServer(t, realClock())
	alice := dial(t, s, fast("alice", "lobby"))
	bob := dial(t, s, fast("bob", "lobby"))
	ctx := ctxLong(t)
	until := time.Now().Add(300 * time.Millisecond)
	note := &client.Note{Text: "brb", Until: until.UnixMilli()}
	require.NoError(t, alice.Set(ctx, client.Record{Note: note}))
	waitFor(t, bob, func(p *protocol.Presence) bool { r, ok := p.Updated["alice"]; return ok && r.Note != nil })
	p := waitFor(t, bob, func(p *protocol.Presence) bool { r, ok := p.Updated["alice"]; return ok && r.Note == nil })
	assert.False(t, time.Now().Before(until), "cleared at until, not before")
	assert.Equal(t, client.Record{}, p.Updated["alice"])
	assert.Equal(t, client.Record{}, record(t, bob, "alice"))
	assert.Equal(t, client.Record{}, record(t, alice, "alice"))
}

// TestSetRefusedHere: a record the server would refuse is refused without
// sending, with an error that names the field.
func TestSetRefusedHere(t *testing.T) {
	s := startServer(t, realClock())
	alice := dial(t, s, fast("alice", "lobby"))
	ctx := ctxLong(t)
	long := func(n int, s string) string {
		out := ""
		for range n {
			out += s
		}
		return out
	}
	now := time.Now()
	for _, tc := range []struct {
		r     client.Record
		field string
	}{
		{client.Record{}, `set needs "mode" or "note"`},
		{client.Record{Info: json.RawMessage(`{"name":"A"}`)}, `set needs "mode" or "note"`},
		{client.Record{Mode: "busy"}, `"mode"`},
		{client.Record{Note: &client.Note{Until: now.Add(time.Hour).UnixMilli()}}, `"note.text" or "note.emoji"`},
		{client.Record{Note: &client.Note{Text: long(129, "é")}}, `"note.text"`},
		{client.Record{Note: &client.Note{Emoji: long(17, "😀")}}, `"note.emoji"`},
		{client.Record{Note: &client.Note{Text: "x", Until: now.Add(-time.Second).UnixMilli()}}, `"note.until"`},
		{client.Record{Note: &client.Note{Text: "x", Until: now.Add(protocol.MaxNoteAhead + time.Minute).UnixMilli()}}, `"note.until"`},
		{client.Record{Note: &client.Note{Text: "x", Until: -1}}, `"note.until"`},
	} {
		err := alice.Set(ctx, tc.r)
		require.ErrorIs(t, err, client.ErrInvalidRecord, "%+v", tc.r)
		assert.Contains(t, err.Error(), tc.field)
	}
	// At the limits, counted in code points.
	ok := client.Record{Mode: protocol.ModeOnline, Note: &client.Note{Text: long(128, "é"), Emoji: long(16, "😀"),
		Until: time.Now().Add(protocol.MaxNoteAhead - time.Minute).UnixMilli()}}
	require.NoError(t, alice.Set(ctx, ok))
	ok.Mode = ""
	assert.Equal(t, ok, record(t, alice, "alice"), `"online" kept as ""`)
	for len(alice.Events()) > 0 {
		if e, is := (<-alice.Events()).(*protocol.Error); is {
			t.Errorf("error frame: %+v", e)
		}
	}
}

// infoToken signs a token for uid with an info claim.
func infoToken(t *testing.T, uid string, info string) string {
	t.Helper()
	claims := jwt.MapClaims{"sub": uid, "exp": time.Now().Add(time.Hour).Unix()}
	if info != "" {
		claims["info"] = json.RawMessage(info)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	require.NoError(t, err)
	return tok
}

// TestInfoComesFromTheToken: a user's info is its token's info claim, and
// Set leaves it as it is.
func TestInfoComesFromTheToken(t *testing.T) {
	s := jwtServer(t)
	alice := dial(t, s, client.Options{Token: infoToken(t, "alice", `{"name": "Alice"}`), Channels: []string{"lobby"}})
	bob := dial(t, s, client.Options{Token: infoToken(t, "bob", ""), Channels: []string{"lobby"}})
	ctx := ctxLong(t)
	assert.JSONEq(t, `{"name":"Alice"}`, string(record(t, bob, "alice").Info))
	eventually(t, func() bool { _, ok := alice.Record("bob"); return ok }, "bob's join")
	assert.Empty(t, record(t, alice, "bob").Info)
	assert.JSONEq(t, `{"name":"Alice"}`, string(record(t, alice, "alice").Info), "from its own snapshot")

	require.NoError(t, alice.Set(ctx, client.Record{Info: json.RawMessage(`{"name":"Mallory"}`), Mode: protocol.ModeDND}))
	eventually(t, func() bool { r, _ := bob.Record("alice"); return r.Mode == protocol.ModeDND }, "dnd")
	assert.JSONEq(t, `{"name":"Alice"}`, string(record(t, bob, "alice").Info), "info is not the client's to set")
	assert.JSONEq(t, `{"name":"Alice"}`, string(record(t, alice, "alice").Info))
}

// TestInvisible: an invisible user is offline and a member of nothing to
// the others, who forget its record; its own Client sees itself as before,
// invisible, also after a reconnect; visible again, it is back.
func TestInvisible(t *testing.T) {
	s := startServer(t, realClock())
	var d dialer
	opts := fast("alice", "lobby")
	opts.Dialer = d.websocket()
	alice := dial(t, s, opts)
	bob := dial(t, s, fast("bob", "lobby"))
	ctx := ctxLong(t)
	require.NoError(t, bob.Watch(ctx, []string{"alice"}))
	require.NoError(t, alice.Set(ctx, client.Record{Mode: protocol.ModeInvisible, Note: &client.Note{Text: "hiding"}}))
	p := waitFor(t, bob, func(p *protocol.Presence) bool { return len(p.Leaves) > 0 })
	assert.Equal(t, []string{"alice"}, p.Leaves)
	eventually(t, func() bool { return bob.User("alice").State == client.Offline }, "alice offline to bob")
	_, ok := bob.Record("alice")
	assert.False(t, ok, "forgotten")
	assert.Equal(t, []string{"bob"}, bob.Channel("lobby").Members)
	assert.Equal(t, client.Record{Mode: protocol.ModeInvisible, Note: &client.Note{Text: "hiding"}}, record(t, alice, "alice"))

	d.cut()
	nextState(t, alice, client.Waiting)
	nextState(t, alice, client.Live)
	assert.Equal(t, protocol.ModeInvisible, record(t, alice, "alice").Mode, "from the welcome")
	assert.Equal(t, "hiding", record(t, alice, "alice").Note.Text)
	assert.Equal(t, []string{"alice", "bob"}, alice.Channel("lobby").Members, "its own snapshot lists itself")
	_, ok = bob.Record("alice")
	assert.False(t, ok, "the reconnect showed bob nothing")

	require.NoError(t, alice.Set(ctx, client.Record{Mode: protocol.ModeOnline, Note: &client.Note{}}))
	p = waitFor(t, bob, func(p *protocol.Presence) bool { return len(p.Joins) > 0 })
	assert.Equal(t, []string{"alice"}, p.Joins)
	eventually(t, func() bool { return bob.User("alice").State == client.Active }, "alice online to bob")
	assert.Equal(t, client.Record{}, record(t, bob, "alice"))
}

// TestWatchedRecords: a watched user's record comes with the status frames
// and the watch answer; it is forgotten when the user goes offline, whose
// last seen a later watch answer gives at once.
func TestWatchedRecords(t *testing.T) {
	s := startServer(t, realClock())
	bob := dial(t, s, fast("bob"))
	ctx := ctxLong(t)
	require.NoError(t, bob.Watch(ctx, []string{"dave"}))
	dave := dial(t, s, fast("dave"))
	waitFor(t, bob, func(st *protocol.Status) bool { return len(st.Online) > 0 })
	assert.Equal(t, client.Record{}, record(t, bob, "dave"))

	note := client.Record{Note: &client.Note{Text: "lunch", Emoji: "🥪"}}
	require.NoError(t, dave.Set(ctx, note))
	st := waitFor(t, bob, func(st *protocol.Status) bool { return len(st.Updated) > 0 })
	assert.Equal(t, map[string]client.Record{"dave": note}, st.Updated, "the status event carries the update")
	assert.Equal(t, note, record(t, bob, "dave"))

	carol := dial(t, s, fast("carol"))
	require.NoError(t, carol.Watch(ctx, []string{"dave"}))
	assert.Equal(t, note, record(t, carol, "dave"), "from the watch answer")

	require.NoError(t, dave.Close())
	waitFor(t, bob, func(st *protocol.Status) bool { return len(st.Offline) > 0 })
	_, ok := bob.Record("dave")
	assert.False(t, ok, "forgotten when offline")
	lastSeen := bob.User("dave").LastSeen
	require.False(t, lastSeen.IsZero())

	erin := dial(t, s, fast("erin"))
	require.NoError(t, erin.Watch(ctx, []string{"dave"}))
	assert.Equal(t, client.UserState{State: client.Offline, LastSeen: lastSeen}, erin.User("dave"), "last seen from the watch answer")
	_, ok = erin.Record("dave")
	assert.False(t, ok)

	// A user back online shows the record the server kept for it.
	dave = dial(t, s, fast("dave"))
	st = waitFor(t, bob, func(st *protocol.Status) bool { return len(st.Online) > 0 })
	assert.Equal(t, map[string]client.Record{"dave": note}, st.Users)
	assert.Equal(t, note, record(t, bob, "dave"))
	assert.Equal(t, note, record(t, dave, "dave"), "its own, from the welcome")
}

// TestRecordsAcrossReconnects: a Client cut off while a member changes its
// record has the new record from its new snapshot, and its own record
// stays what it set.
func TestRecordsAcrossReconnects(t *testing.T) {
	s := startServer(t, realClock())
	var d dialer
	opts := fast("bob", "lobby")
	opts.Dialer = d.websocket()
	bob := dial(t, s, opts)
	alice := dial(t, s, fast("alice", "lobby"))
	ctx := ctxLong(t)
	require.NoError(t, bob.Set(ctx, client.Record{Mode: protocol.ModeDND}))
	require.NoError(t, alice.Set(ctx, client.Record{Note: &client.Note{Text: "one"}}))
	eventually(t, func() bool { return hasRecord(bob, "alice", client.Record{Note: &client.Note{Text: "one"}}) }, "first note")

	d.hold()
	d.cut()
	nextState(t, bob, client.Waiting)
	require.NoError(t, alice.Set(ctx, client.Record{Note: &client.Note{Text: "two"}}))
	assert.Equal(t, "one", record(t, bob, "alice").Note.Text, "the last state is kept until the new snapshot")
	d.release()
	nextState(t, bob, client.Live)
	assert.Equal(t, client.Record{Note: &client.Note{Text: "two"}}, record(t, bob, "alice"), "from the new snapshot")
	assert.Equal(t, client.Record{Mode: protocol.ModeDND}, record(t, bob, "bob"), "its own, kept by the server")
}

// TestRecordsOfPagedMembers: a snapshot cut at the member list brings the
// records of the members it lists only; LoadMembers brings the others',
// and a diff's update reaches the members held.
func TestRecordsOfPagedMembers(t *testing.T) {
	cfg := realClock()
	cfg.presence.MemberList = 2
	s := startServer(t, cfg)
	ctx := ctxLong(t)
	var ms []*member
	for _, uid := range []string{"m1", "m2", "m3", "m4"} {
		m := s.connect(t, uid, "big")
		ms = append(ms, m)
		require.NoError(t, s.node.Set(m, protocol.Set{Mode: protocol.ModeDND, Note: &protocol.Note{Text: uid}, NoteSet: true}))
	}
	opts := fast("watcher", "big")
	opts.PageLimit = 2
	c := dial(t, s, opts)
	want := func(uid string) client.Record {
		return client.Record{Mode: protocol.ModeDND, Note: &client.Note{Text: uid}}
	}
	assert.Equal(t, want("m1"), record(t, c, "m1"))
	assert.Equal(t, want("m2"), record(t, c, "m2"))
	_, ok := c.Record("m4")
	assert.False(t, ok, "not listed yet")

	require.NoError(t, c.LoadMembers(ctx, "big"))
	for _, uid := range []string{"m1", "m2", "m3", "m4"} {
		assert.Equal(t, want(uid), record(t, c, uid), uid)
	}
	require.NoError(t, s.node.Set(ms[3], protocol.Set{NoteSet: true}))
	eventually(t, func() bool { return hasRecord(c, "m4", client.Record{Mode: protocol.ModeDND}) }, "m4's note cleared")
	s.disconnect(ms[2])
	eventually(t, func() bool { _, ok := c.Record("m3"); return !ok }, "m3 forgotten when it left")
}
