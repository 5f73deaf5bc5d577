package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// getBody answers GET path with authorization ("": none): its status and
// its body.
func (s *testServer) getBody(t *testing.T, path, authorization string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
	require.NoError(t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// lobbyPair connects alice and bob to lobby and returns them listening,
// past the tick of bob's join.
func lobbyPair(t *testing.T, s *testServer) (alice, bob *listener) {
	t.Helper()
	a, _ := s.dialIn(t, "alice", "lobby")
	b, _ := s.dialIn(t, "bob", "lobby")
	s.step(1)
	alice, bob = listen(a), listen(b)
	alice.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":["bob"],"leaves":[]}`)
	return alice, bob
}

// A set reaches the members of the user's channels in the next tick's
// diff, as the whole new record under "updated", and the user's own
// connections see it too; there is no answer of its own.
func TestSetGoesOutInTheNextDiff(t *testing.T) {
	s := startServer(t, testConfig())
	alice, bob := lobbyPair(t, s)
	send(t, alice.ws, `{"type":"set","mode":"dnd","note":{"text":"In a meeting","emoji":"📅"}}`)
	alice.sync(t)
	s.step(1)
	want := `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"mode":"dnd","note":{"text":"In a meeting","emoji":"📅"}}}}`
	assert.Equal(t, want, bob.next(t))
	assert.Equal(t, want, alice.next(t), "her own connection sees it too")

	// Cleared: the record is empty, written {}.
	send(t, alice.ws, `{"type":"set","mode":"online","note":null}`)
	alice.sync(t)
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{}}}`, bob.next(t))
}

// Changes within one tick are coalesced: the last value wins, and a round
// trip back to what the members were told is nothing at all.
func TestSetsAreCoalescedPerTick(t *testing.T) {
	s := startServer(t, testConfig())
	alice, bob := lobbyPair(t, s)
	for _, f := range []string{
		`{"type":"set","note":{"text":"a"}}`,
		`{"type":"set","note":{"text":"b"}}`,
		`{"type":"set","mode":"dnd"}`,
		`{"type":"set","note":{"text":"c"}}`,
	} {
		send(t, alice.ws, f)
	}
	alice.sync(t)
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"mode":"dnd","note":{"text":"c"}}}}`, bob.next(t))

	// A round trip within a tick: dnd off and on again, a note changed and
	// changed back.
	for _, f := range []string{
		`{"type":"set","mode":"online","note":{"text":"x"}}`,
		`{"type":"set","mode":"dnd","note":{"text":"c"}}`,
	} {
		send(t, alice.ws, f)
	}
	alice.sync(t)
	s.step(1)
	// The next frame bob gets is about the change after: nothing came of
	// the round trip.
	send(t, alice.ws, `{"type":"set","note":null}`)
	alice.sync(t)
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"mode":"dnd"}}}`, bob.next(t))
}

// A bad set is an error frame naming the field, and changes nothing: a
// set is applied whole or not at all.
func TestABadSetNamesTheFieldAndChangesNothing(t *testing.T) {
	s := startServer(t, testConfig())
	alice, bob := lobbyPair(t, s)
	send(t, alice.ws, `{"type":"set","mode":"dnd"}`)
	alice.sync(t)
	s.step(1)
	bob.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"mode":"dnd"}}}`)
	alice.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"mode":"dnd"}}}`)

	now := time.Now()
	long := strings.Repeat("é", 129)
	for _, tc := range []struct{ frame, field string }{
		{`{"type":"set"}`, `"mode"`},
		{`{"type":"set","mode":"away"}`, `"mode"`},
		{`{"type":"set","mode":null}`, `"mode"`},
		{`{"type":"set","mode":"online","note":"busy"}`, `"note"`},
		{`{"type":"set","mode":"online","note":{"text":"` + long + `"}}`, `"note.text"`},
		{`{"type":"set","mode":"online","note":{"text":7}}`, `"note.text"`},
		{`{"type":"set","mode":"online","note":{"emoji":"` + strings.Repeat("🙂", 17) + `"}}`, `"note.emoji"`},
		{`{"type":"set","mode":"online","note":{}}`, `"note.text"`},
		{fmt.Sprintf(`{"type":"set","mode":"online","note":{"text":"x","until":%d}}`, now.Add(-time.Minute).UnixMilli()), `"note.until"`},
		{fmt.Sprintf(`{"type":"set","mode":"online","note":{"text":"x","until":%d}}`, now.Add(8*24*time.Hour).UnixMilli()), `"note.until"`},
		{`{"type":"set","mode":"online","note":{"text":"x","until":"soon"}}`, `"note.until"`},
	} {
		send(t, alice.ws, tc.frame)
		var e struct{ Type, Error string }
		require.NoError(t, json.Unmarshal([]byte(alice.next(t)), &e), tc.frame)
		assert.Equal(t, "error", e.Type, tc.frame)
		assert.Contains(t, e.Error, tc.field, tc.frame)
	}
	// At the limits, a set is fine: 128 code points of text, 16 of emoji.
	ok := fmt.Sprintf(`{"type":"set","note":{"text":"%s","emoji":"%s","until":%d}}`, strings.Repeat("é", 128), strings.Repeat("🙂", 16), now.Add(6*24*time.Hour).UnixMilli())
	send(t, alice.ws, ok)
	alice.sync(t)
	s.step(1)
	var diff struct {
		Updated map[string]struct {
			Mode string
			Note struct{ Text, Emoji string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(bob.next(t)), &diff))
	assert.Equal(t, "dnd", diff.Updated["alice"].Mode, "the refused sets changed nothing")
	assert.Equal(t, strings.Repeat("é", 128), diff.Updated["alice"].Note.Text)
}

// A user's record comes with it wherever it first appears: a joined
// snapshot, a members page, a watching frame, a diff's joins, a status
// frame's online, and the server API; a reconnect within the last-seen TTL
// keeps its mode and note, which its welcome carries.
func TestRecordsComeWithTheUser(t *testing.T) {
	s := startServer(t, testConfig())
	alice, _ := s.dialIn(t, "alice", "lobby")
	wa := listen(alice)
	send(t, alice, `{"type":"set","mode":"dnd","note":{"text":"lunch"}}`)
	wa.sync(t)
	rec := `{"alice":{"mode":"dnd","note":{"text":"lunch"}}}`

	bob, snaps := s.dialIn(t, "bob", "lobby")
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":2,"members":["alice","bob"],"users":`+rec+`}`, snaps[0])
	wb := listen(bob)
	send(t, bob, `{"type":"members","channel":"lobby"}`)
	assert.Equal(t, `{"type":"members","channel":"lobby","count":2,"members":["alice","bob"],"users":`+rec+`}`, wb.next(t))
	send(t, bob, `{"type":"watch","uids":["alice","carol"]}`)
	assert.Equal(t, `{"type":"watching","online":["alice"],"users":`+rec+`}`, wb.next(t))

	code, body := s.getBody(t, "/api/presence/alice", "")
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"uid":"alice","online":true,"connections":1,"state":"active","mode":"dnd","note":{"text":"lunch"}}`, body)
	code, body = s.getBody(t, "/api/channels/lobby?records=1", "")
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"channel":"lobby","count":2,"members":["alice","bob"],"users":`+rec+`}`, body)
	code, _ = s.getBody(t, "/api/channels/lobby?records=yes", "")
	assert.Equal(t, http.StatusBadRequest, code)

	// Gone and back within the TTL: the mode and the note are kept.
	require.NoError(t, alice.Close())
	require.Eventually(t, func() bool { return !s.user(t, "alice").Online }, waitLong, time.Millisecond)
	s.step(1)
	wb.until(t, `{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}`)
	wb.until(t, `{"type":"status","online":[],"offline":["alice"]}`)
	again, welcome := s.dial(t, "alice")
	assert.Equal(t, "dnd", welcome["mode"])
	assert.Equal(t, map[string]any{"text": "lunch"}, welcome["note"])
	send(t, again, `{"type":"join","channel":"lobby"}`)
	readUntil(t, again, `{"type":"joined","channel":"lobby","count":2,"members":["alice","bob"],"users":`+rec+`}`)
	s.step(1)
	wb.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":["alice"],"leaves":[],"users":`+rec+`}`)
	wb.until(t, `{"type":"status","online":["alice"],"offline":[],"users":`+rec+`}`)
}

// A watching frame says when the watched users that are offline were last
// there, so a client that starts watching can show it at once.
func TestWatchingCarriesLastSeen(t *testing.T) {
	s := startServer(t, testConfig())
	carol, _ := s.dial(t, "carol")
	require.NoError(t, carol.Close())
	require.Eventually(t, func() bool { return !s.user(t, "carol").Online }, waitLong, time.Millisecond)
	before := time.Now().UnixMilli()
	bob, _ := s.dial(t, "bob")
	send(t, bob, `{"type":"watch","uids":["carol","dave"]}`)
	var w struct {
		Type     string
		Online   []string
		LastSeen map[string]int64 `json:"last_seen"`
	}
	require.NoError(t, json.Unmarshal([]byte(readRaw(t, bob)), &w))
	assert.Equal(t, "watching", w.Type)
	assert.Empty(t, w.Online)
	require.Contains(t, w.LastSeen, "carol")
	assert.LessOrEqual(t, w.LastSeen["carol"], before)
	assert.Greater(t, w.LastSeen["carol"], before-int64(waitLong/time.Millisecond))
	assert.NotContains(t, w.LastSeen, "dave", "never seen: no last seen")
}

// info comes from the token's info claim: checked at the handshake and at
// a refresh (not an object, null or over 512 bytes is 401 or an error
// frame), shown with the user; a refresh with new info updates it, one
// without info clears nothing.
func TestInfoFromTheToken(t *testing.T) {
	s := startServer(t, jwtConfig())
	exp := time.Now().Add(time.Hour).Unix()
	tok := func(sub string, info any) string {
		claims := jwt.MapClaims{"sub": sub, "exp": exp}
		if info != nil {
			claims["info"] = info
		}
		return token(t, claims)
	}
	for name, info := range map[string]any{
		"a string": "Alice", "null": json.RawMessage("null"), "a list": []string{"a"},
		"over 512 bytes": map[string]string{"name": strings.Repeat("x", 510)},
	} {
		assert.Equal(t, http.StatusUnauthorized, s.dialStatus(t, "token="+tok("alice", info)+"&channels=lobby", nil), name)
	}
	alice := s.dialRaw(t, "token="+tok("alice", map[string]string{"name": "Alice"})+"&channels=lobby", nil)
	wa := listen(alice)
	wa.until(t, `{"type":"joined","channel":"lobby","count":1,"members":["alice"],"users":{"alice":{"info":{"name":"Alice"}}}}`)
	bob := s.dialRaw(t, "token="+tok("bob", nil)+"&channels=lobby", nil)
	wb := listen(bob)
	wb.until(t, `{"type":"joined","channel":"lobby","count":2,"members":["alice","bob"],"users":{"alice":{"info":{"name":"Alice"}}}}`)
	s.step(1)

	send(t, alice, `{"type":"refresh","token":"`+tok("alice", map[string]string{"name": "Alice B."})+`"}`)
	send(t, alice, `{"type":"refresh","token":"`+tok("alice", nil)+`"}`) // clears nothing
	wa.sync(t)
	s.step(1)
	wb.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"info":{"name":"Alice B."}}}}`)
	send(t, alice, `{"type":"refresh","token":"`+tok("alice", "no")+`"}`)
	wa.until(t, `{"type":"error","error":"refresh refused: transport: unauthenticated: the \"info\" claim: info must be a JSON object"}`)
}

// Config.UserInfo gives the info of a user whose token has none; its error
// refuses the connection with 401.
func TestUserInfoFromTheEmbedder(t *testing.T) {
	cfg := jwtConfig()
	cfg.UserInfo = func(_ context.Context, uid string) (json.RawMessage, error) {
		if uid == "mallory" {
			return nil, fmt.Errorf("no such user")
		}
		return json.RawMessage(`{ "name" : "` + strings.ToUpper(uid) + `" }`), nil
	}
	s := startServer(t, cfg)
	exp := time.Now().Add(time.Hour).Unix()
	assert.Equal(t, http.StatusUnauthorized, s.dialStatus(t, "token="+token(t, jwt.MapClaims{"sub": "mallory", "exp": exp}), nil))
	ws := s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "alice", "exp": exp})+"&channels=lobby", nil)
	readFrame(t, ws)
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":1,"members":["alice"],"users":{"alice":{"info":{"name":"ALICE"}}}}`, readRaw(t, ws), "compacted")
}

// The newest connection's info is the user's; when it closes, the next
// newest's is.
func TestTheNewestConnectionsInfoWins(t *testing.T) {
	cfg := jwtConfig()
	cfg.APIKey = "k"
	s := startServer(t, cfg)
	exp := time.Now().Add(time.Hour).Unix()
	tok := func(name string) string {
		return token(t, jwt.MapClaims{"sub": "alice", "exp": exp, "info": map[string]string{"name": name}})
	}
	older := s.dialRaw(t, "token="+tok("old"), nil)
	readFrame(t, older)
	newer := s.dialRaw(t, "token="+tok("new"), nil)
	readFrame(t, newer)
	rec := func() string {
		_, body := s.getBody(t, "/api/presence/alice", "apikey k")
		var p struct{ Info map[string]string }
		require.NoError(t, json.Unmarshal([]byte(body), &p))
		return p.Info["name"]
	}
	assert.Equal(t, "new", rec())
	require.NoError(t, newer.Close())
	require.Eventually(t, func() bool { return rec() == "old" }, waitLong, time.Millisecond)
}

// Webhooks (OnEdges) see every set that changed something as an update
// edge with the whole new record, and nothing for a set that changed
// nothing.
func TestSetsAreUpdateEdges(t *testing.T) {
	var mu sync.Mutex
	var updates []presence.Edge
	cfg := testConfig()
	cfg.OnEdges = func(edges []presence.Edge) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range edges {
			if e.Kind == presence.EdgeUpdate {
				updates = append(updates, e)
			}
		}
	}
	s := startServer(t, cfg)
	alice, _ := s.dial(t, "alice")
	w := listen(alice)
	send(t, alice, `{"type":"set","mode":"dnd"}`)
	send(t, alice, `{"type":"set","mode":"dnd"}`) // no change
	send(t, alice, `{"type":"set","note":{"text":"x"}}`)
	w.sync(t)
	s.step(1)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(updates) == 2
	}, waitLong, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "dnd", updates[0].Record.Mode)
	assert.Nil(t, updates[0].Record.Note)
	assert.Equal(t, "x", updates[1].Record.Note.Text)
	assert.Equal(t, "alice", updates[1].UID)
}
