package transport_test

import (
	"net/http"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handled returns once the server handled every frame ws sent before it.
func handled(t *testing.T, ws *websocket.Conn) {
	t.Helper()
	send(t, ws, `{"type":"ping"}`)
	readUntil(t, ws, `{"type":"pong"}`)
}

// A user is away while every one of its tabs is: its channel's members and
// its watchers hear when it turns away and when it is back, and the server
// API says so.
func TestActivityIsPerUserOverTabs(t *testing.T) {
	s := startServer(t, testConfig())
	obs, _ := s.dialIn(t, "obs", "lobby")
	send(t, obs, `{"type":"watch","uids":["alice"]}`)
	readUntil(t, obs, `{"type":"watching","online":[]}`)
	tab1, _ := s.dialIn(t, "alice", "lobby")
	tab2, _ := s.dialIn(t, "alice", "lobby")
	s.step(1)
	readUntil(t, obs, `{"type":"status","online":["alice"],"offline":[]}`)
	state := func() string {
		var p struct{ State string }
		require.Equal(t, http.StatusOK, s.getJSON(t, "/api/presence/alice", &p))
		return p.State
	}

	send(t, tab1, `{"type":"activity","state":"away"}`)
	handled(t, tab1)
	assert.Equal(t, "active", state(), "the other tab is active")
	send(t, tab2, `{"type":"activity","state":"away"}`)
	handled(t, tab2)
	assert.Equal(t, "away", state())
	s.step(1)
	readUntil(t, obs, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"away":["alice"]}`)
	readUntil(t, obs, `{"type":"status","online":[],"offline":[],"away":["alice"]}`)

	late, snaps := s.dialIn(t, "late", "lobby")
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":3,"members":["alice","late","obs"],"away":["alice"]}`}, snaps)
	send(t, late, `{"type":"watch","uids":["alice"]}`)
	readUntil(t, late, `{"type":"watching","online":["alice"],"away":["alice"]}`)

	// A chat is activity.
	send(t, tab1, `{"type":"chat","channel":"lobby","text":"back"}`)
	readUntil(t, tab1, `{"type":"chat","channel":"lobby","from":"alice","text":"back"}`)
	assert.Equal(t, "active", state())
	s.step(1)
	readUntil(t, obs, `{"type":"presence","channel":"lobby","count":3,"joins":["late"],"leaves":[],"active":["alice"]}`)
	readUntil(t, late, `{"type":"status","online":[],"offline":[],"active":["alice"]}`)

	send(t, tab1, `{"type":"activity","state":"idle"}`)
	readUntil(t, tab1, `{"type":"error","error":"activity needs \"state\": \"away\" or \"active\""}`)
}

// With AwayAfter a tab that sends no activity, chat, typing or join frame
// turns away, whatever keepalives it sends; a join does not bring it back.
func TestAwayAfterOverTheWire(t *testing.T) {
	cfg := testConfig()
	cfg.AwayAfter = 3 * cfg.Tick
	s := startServer(t, cfg)
	obs, _ := s.dialIn(t, "obs", "lobby")
	bob, _ := s.dialIn(t, "bob", "lobby")
	s.step(1)
	readUntil(t, obs, `{"type":"presence","channel":"lobby","count":2,"joins":["bob"],"leaves":[]}`)
	send(t, obs, `{"type":"activity","state":"active"}`) // obs turns away a step after bob
	handled(t, obs)
	for range 3 {
		handled(t, bob) // a keepalive
		s.step(1)
	}
	readUntil(t, obs, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"away":["bob"]}`)
	send(t, bob, `{"type":"join","channel":"lobby"}`) // a join leaves it away
	readUntil(t, bob, `{"type":"joined","channel":"lobby","count":2,"members":["bob","obs"],"away":["bob"]}`)
	send(t, bob, `{"type":"activity","state":"active"}`)
	handled(t, bob)
	send(t, obs, `{"type":"activity","state":"active"}`)
	handled(t, obs)
	s.step(1)
	readUntil(t, obs, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"active":["bob"]}`)
}
