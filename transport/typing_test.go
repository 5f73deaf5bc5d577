package transport_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// typist is a client that types: typing frames go to the engine off the
// reader, in order with chats, so after its typing frames it chats in a
// channel of its own and waits for the echo, by which the server has
// handed its typing over.
type typist struct {
	uid string
	ws  *websocket.Conn
	w   *listener
}

// dialTypist connects uid to channels and to a channel of its own for
// typed's round trips.
func (s *testServer) dialTypist(t *testing.T, uid string, channels ...string) *typist {
	t.Helper()
	ws, _ := s.dialIn(t, uid, append(slices.Clone(channels), "own-"+uid)...)
	return &typist{uid: uid, ws: ws, w: listen(ws)}
}

// typed sends the frames, then waits until the server handed them over.
func (tp *typist) typed(t *testing.T, frames ...string) {
	t.Helper()
	for _, f := range frames {
		send(t, tp.ws, f)
	}
	send(t, tp.ws, `{"type":"chat","channel":"own-`+tp.uid+`","text":"sync"}`)
	tp.w.until(t, `{"type":"chat","channel":"own-`+tp.uid+`","from":"`+tp.uid+`","text":"sync"}`)
}

// quiet checks that nothing more came to w: the server answers a ping in
// order with what it queued before.
func quiet(t *testing.T, w *listener, ws *websocket.Conn) {
	t.Helper()
	send(t, ws, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, w.next(t), "no other frame")
}

const lobbyTyping = `{"type":"typing","channel":"lobby","users":`

// Several typing frames from several users within a tick reach each member
// as one frame at the tick; a chat in the channel ends the chatter's
// typing, leaving ends the leaver's.
func TestTypingCoalescedAndEndedByChatAndLeave(t *testing.T) {
	s := startServer(t, testConfig())
	obsWS, _ := s.dialIn(t, "obs", "lobby")
	obs := listen(obsWS)
	alice := s.dialTypist(t, "alice", "lobby")
	bob := s.dialTypist(t, "bob", "lobby")
	s.step(1)
	obs.until(t, `{"type":"presence","channel":"lobby","count":3,"joins":["alice","bob"],"leaves":[]}`)

	typing := `{"type":"typing","channel":"lobby"}`
	alice.typed(t, typing, typing, typing)
	bob.typed(t, typing, typing)
	quiet(t, obs, obsWS) // nothing before the tick
	s.step(1)
	assert.Equal(t, lobbyTyping+`["alice","bob"]}`, obs.next(t))
	quiet(t, obs, obsWS)
	alice.w.until(t, lobbyTyping+`["alice","bob"]}`)

	alice.typed(t, `{"type":"chat","channel":"lobby","text":"hi"}`)
	assert.Equal(t, `{"type":"chat","channel":"lobby","from":"alice","text":"hi"}`, obs.next(t))
	s.step(1)
	assert.Equal(t, lobbyTyping+`["bob"]}`, obs.next(t))

	bob.typed(t, `{"type":"leave","channel":"lobby"}`)
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":["bob"]}`, obs.next(t))
	assert.Equal(t, lobbyTyping+`[]}`, obs.next(t))
	quiet(t, obs, obsWS)
}

// Typing ends TypingTTL (in whole ticks) plus at most one tick after the
// last typing frame: with a 300 ms TTL and a 100 ms tick, at the fourth
// step after it.
func TestTypingExpires(t *testing.T) {
	cfg := testConfig()
	cfg.TypingTTL = 300 * time.Millisecond
	s := startServer(t, cfg)
	obsWS, _ := s.dialIn(t, "obs", "lobby")
	obs := listen(obsWS)
	alice := s.dialTypist(t, "alice", "lobby")
	alice.typed(t, `{"type":"typing","channel":"lobby"}`)
	s.step(1)
	obs.until(t, lobbyTyping+`["alice"]}`)
	s.step(2)
	quiet(t, obs, obsWS)
	s.step(1)
	assert.Equal(t, lobbyTyping+`[]}`, obs.next(t))
}

// Typing in a channel not joined is refused with an error frame naming it;
// a typing frame makes an away connection active; a joined snapshot is
// followed by who types there; more than ten typists are listed as ten and
// counted.
func TestTypingRefusalActivitySnapshotAndCount(t *testing.T) {
	s := startServer(t, testConfig())
	obsWS, _ := s.dialIn(t, "obs", "lobby")
	obs := listen(obsWS)
	alice := s.dialTypist(t, "alice", "lobby")

	send(t, alice.ws, `{"type":"typing","channel":"room"}`)
	alice.w.until(t, `{"type":"error","error":"not a member of the channel: join it first","channel":"room"}`)

	send(t, alice.ws, `{"type":"activity","state":"away"}`)
	alice.w.sync(t) // not typed: its chat would make alice active again
	s.step(1)
	obs.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":["alice"],"leaves":[],"away":["alice"]}`)
	// Not typed: its chat would make alice active itself. Typing makes the
	// connection active before it goes to the engine, so the active diff
	// comes no later than the typing frame.
	send(t, alice.ws, `{"type":"typing","channel":"lobby"}`)
	var got []string
	for deadline := time.Now().Add(waitLong); !slices.Contains(got, lobbyTyping+`["alice"]}`); {
		require.True(t, time.Now().Before(deadline), "no typing frame; got %q", got)
		s.step(1)
		send(t, obsWS, `{"type":"ping"}`)
		for f := obs.next(t); f != `{"type":"pong"}`; f = obs.next(t) {
			got = append(got, f)
		}
	}
	assert.Equal(t, []string{
		`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"active":["alice"]}`,
		lobbyTyping + `["alice"]}`,
	}, got)

	dave, _ := s.dial(t, "dave")
	send(t, dave, `{"type":"join","channel":"lobby"}`)
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":3,"members":["alice","dave","obs"]}`, readRaw(t, dave))
	assert.Equal(t, lobbyTyping+`["alice"]}`, readRaw(t, dave))

	var ten []string
	for i := range 11 {
		uid := fmt.Sprintf("u%02d", i)
		if i < 9 {
			ten = append(ten, `"`+uid+`"`)
		}
		s.dialTypist(t, uid, "lobby").typed(t, `{"type":"typing","channel":"lobby"}`)
	}
	s.step(1)
	obs.until(t, lobbyTyping+`["alice",`+strings.Join(ten, ",")+`],"count":12}`)
}

// Frames per typing burst: every member of a room of 50 types at once, and
// each member gets one frame at the tick, 50 in all, however many typing
// frames came.
func TestTypingBurstCostsOneFramePerMember(t *testing.T) {
	s := startServer(t, testConfig())
	const members = 50
	var typists []*typist
	for i := range members {
		typists = append(typists, s.dialTypist(t, fmt.Sprintf("m%02d", i), "room"))
	}
	s.step(1)
	for _, tp := range typists {
		tp.typed(t, `{"type":"typing","channel":"room"}`, `{"type":"typing","channel":"room"}`)
	}
	s.step(1)
	frames := 0
	for _, tp := range typists {
		for {
			f := tp.w.next(t)
			if strings.HasPrefix(f, `{"type":"typing","channel":"room"`) {
				assert.Contains(t, f, `"count":50`)
				frames++
				break
			}
		}
		quiet(t, tp.w, tp.ws)
	}
	assert.Equal(t, members, frames)
	t.Logf("%d members each sent 2 typing frames in one tick: %d typing frames went out", members, frames)
}

// Over real time with a short tick, typing ends between the TTL and the TTL
// plus one tick after the last typing frame (plus the loopback's delivery):
// logged, not asserted, as the machine may be busy.
func TestTypingEndsOnTimeOverRealTime(t *testing.T) {
	cfg := testConfig()
	cfg.Tick = 20 * time.Millisecond
	cfg.TypingTTL = 200 * time.Millisecond
	s := startServerWith(t, cfg, serverOptions{clock: true})
	obsWS, _ := s.dialIn(t, "obs", "lobby")
	obs := listen(obsWS)
	alice := s.dialTypist(t, "alice", "lobby")
	var took []time.Duration
	for i := range 5 {
		// Spreads the last frames over the tick: each iteration starts
		// just after the step that ended the one before.
		time.Sleep(time.Duration(i) * cfg.Tick / 5)
		last := time.Now()
		alice.typed(t, `{"type":"typing","channel":"lobby"}`)
		obs.until(t, lobbyTyping+`["alice"]}`)
		obs.until(t, lobbyTyping+`[]}`)
		took = append(took, time.Since(last))
	}
	slices.Sort(took)
	t.Logf("typing ended %v..%v after the last typing frame (TTL %v, tick %v; bound TTL+tick = %v plus delivery)",
		took[0], took[len(took)-1], cfg.TypingTTL, cfg.Tick, cfg.TypingTTL+cfg.Tick)
}
