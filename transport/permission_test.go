package transport_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

// A refresh whose channels claim no longer allows a joined channel takes
// the connection out of it: a left frame to it, a leave diff to the others
// at the tick, and no more chat there.
func TestNarrowerTokenLeavesChannels(t *testing.T) {
	s := startServer(t, jwtConfig())
	exp := time.Now().Add(time.Hour).Unix()
	alice := listen(s.dialRaw(t, "channels=lobby,staff&token="+token(t, jwt.MapClaims{"sub": "alice", "exp": exp}), nil))
	alice.until(t, `{"type":"joined","channel":"staff","count":1,"members":["alice"]}`)
	bob := listen(s.dialRaw(t, "channels=staff&token="+token(t, jwt.MapClaims{"sub": "bob", "exp": exp}), nil))
	bob.until(t, `{"type":"joined","channel":"staff","count":2,"members":["alice","bob"]}`)
	s.step(1)
	alice.until(t, `{"type":"presence","channel":"staff","count":2,"joins":["bob"],"leaves":[]}`)

	send(t, alice.ws, `{"type":"refresh","token":"`+token(t, jwt.MapClaims{"sub": "alice", "exp": exp, "channels": []string{"lobby"}})+`"}`)
	alice.until(t, `{"type":"left","channel":"staff"}`)
	s.step(1)
	bob.until(t, `{"type":"presence","channel":"staff","count":1,"joins":[],"leaves":["alice"]}`)

	send(t, alice.ws, `{"type":"chat","channel":"staff","text":"still here?"}`)
	alice.until(t, `{"type":"error","error":"not a member of the channel: join it first","channel":"staff"}`)
	send(t, alice.ws, `{"type":"join","channel":"staff"}`)
	alice.until(t, `{"type":"error","error":"not allowed to join this channel","channel":"staff"}`)
	_, members, err := s.hub.Members(context.Background(), "staff", 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"bob"}, members)
	send(t, alice.ws, `{"type":"chat","channel":"lobby","text":"hi"}`)
	alice.until(t, `{"type":"chat","channel":"lobby","from":"alice","text":"hi"}`)
}

// In token mode a user watches only whom its watch claim, or the
// embedder's hook, allows; the refused IDs are named and the rest watched.
func TestWatchNeedsPermission(t *testing.T) {
	exp := time.Now().Add(time.Hour).Unix()
	t.Run("no claim, no hook", func(t *testing.T) {
		s := startServer(t, jwtConfig())
		w := listen(s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "eve", "exp": exp}), nil))
		w.next(t) // welcome
		send(t, w.ws, `{"type":"watch","uids":["alice","bob"]}`)
		w.until(t, `{"type":"watching","online":[]}`)
		w.until(t, `{"type":"error","error":"not allowed to watch \"alice\", \"bob\"; the others are watched"}`)
	})
	t.Run("the claim", func(t *testing.T) {
		s := startServer(t, jwtConfig())
		listen(s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "team-1", "exp": exp}), nil)).next(t)
		listen(s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "boss", "exp": exp}), nil)).next(t)
		w := listen(s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "team-2", "exp": exp, "watch": []string{"team-*"}}), nil))
		w.next(t)
		send(t, w.ws, `{"type":"watch","uids":["team-1","boss"]}`)
		w.until(t, `{"type":"watching","online":["team-1"]}`)
		w.until(t, `{"type":"error","error":"not allowed to watch \"boss\"; the others are watched"}`)
	})
	t.Run("the hook", func(t *testing.T) {
		cfg := jwtConfig()
		cfg.AuthorizeWatch = func(uid, target string) bool { return target != "boss" }
		s := startServer(t, cfg)
		listen(s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "boss", "exp": exp}), nil)).next(t)
		listen(s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "carol", "exp": exp}), nil)).next(t)
		w := listen(s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "eve", "exp": exp}), nil))
		w.next(t)
		send(t, w.ws, `{"type":"watch","uids":["boss","carol"]}`)
		w.until(t, `{"type":"watching","online":["carol"]}`)
		w.until(t, `{"type":"error","error":"not allowed to watch \"boss\"; the others are watched"}`)
	})
	t.Run("demo mode watches everyone", func(t *testing.T) {
		s := startServer(t, transport.Config{Slots: 31, Tick: 100 * time.Millisecond})
		s.dial(t, "boss")
		ws, _ := s.dial(t, "eve")
		w := listen(ws)
		send(t, ws, `{"type":"watch","uids":["boss"]}`)
		w.until(t, `{"type":"watching","online":["boss"]}`)
		w.sync(t)
	})
	t.Run("the hook in demo mode", func(t *testing.T) {
		s := startServer(t, transport.Config{Slots: 31, Tick: 100 * time.Millisecond,
			AuthorizeWatch: func(uid, target string) bool { return target != "boss" }})
		s.dial(t, "boss")
		ws, _ := s.dial(t, "eve")
		w := listen(ws)
		send(t, ws, `{"type":"watch","uids":["boss"]}`)
		w.until(t, `{"type":"watching","online":[]}`)
		w.until(t, `{"type":"error","error":"not allowed to watch \"boss\"; the others are watched"}`)
	})
}

// A POST body is one JSON object: anything after it is refused, and
// nothing is published.
func TestAPIBodyWithTrailingDataIsRefused(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dialIn(t, "alice", "lobby")
	w := listen(ws)
	status, body := s.do(t, "POST", "/api/publish", `{"channel":"lobby","data":{"n":1}}{"channel":"lobby","data":{"n":2}}`, "")
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "nothing after it")
	status, _ = s.do(t, "POST", "/api/publish", `{"channel":"lobby","data":{"n":3}}`+"\n", "")
	assert.Equal(t, http.StatusNoContent, status, "a trailing newline is no data")
	w.until(t, `{"type":"publish","channel":"lobby","data":{"n":3}}`)
}

// stallingEngine is the memory engine whose Publish of a chat waits until
// the test lets it go, as a networked engine does while its store stalls.
type stallingEngine struct {
	presence.Engine
	gate chan struct{}
	// held, if set, hears the sender of each chat or typing frame the
	// engine holds, when it starts holding it.
	held chan string
}

func (e *stallingEngine) Publish(ctx context.Context, m presence.Message) error {
	if m.From == "" {
		return e.Engine.Publish(ctx, m)
	}
	if e.held != nil {
		e.held <- m.From
	}
	select {
	case <-e.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return e.Engine.Publish(ctx, m)
}

// A stalled engine holds up the connection's inbox, never its reader: every
// frame is read and counted as a keepalive while a chat waits, the inbox
// takes what fits and refuses the rest with one error frame in its turn,
// and the chats that waited go out in order when the engine comes back.
func TestAStalledEngineHoldsTheInboxNotTheReader(t *testing.T) {
	const chats = 80
	e := &stallingEngine{Engine: presence.NewMemoryEngine(), gate: make(chan struct{}), held: make(chan string, chats)}
	cfg := testConfig()
	cfg.Engine = e
	s := startServerWith(t, cfg, serverOptions{handover: 10 * waitLong}) // no chat gives up, however slow the machine
	ws, _ := s.dialIn(t, "alice", "lobby")
	w := listen(ws)
	// The first chat reaches the engine before the others are sent, so
	// that the inbox behind it takes exactly its limit.
	send(t, ws, `{"type":"chat","channel":"lobby","text":"0"}`)
	select {
	case from := <-e.held:
		require.Equal(t, "alice", from)
	case <-time.After(waitLong):
		require.FailNow(t, "the first chat never reached the engine")
	}
	for i := 1; i < chats; i++ {
		send(t, ws, fmt.Sprintf(`{"type":"chat","channel":"lobby","text":"%d"}`, i))
	}
	s.waitMetric(t, "presenced_keepalives_total", map[string]string{"kind": "text"}, chats)
	// The reader counts a keepalive before it hands the frame to the
	// inbox: wait for the refusals too, or the last frames could still be
	// on their way and find room once the engine comes back.
	refused := chats - 1 - transport.InboxLimit
	s.waitMetric(t, "presenced_frames_refused_total", nil, float64(refused))
	close(e.gate)
	for i := range chats - refused {
		assert.Equal(t, fmt.Sprintf(`{"type":"chat","channel":"lobby","from":"alice","text":"%d"}`, i), w.next(t), "in order")
	}
	assert.Equal(t, `{"type":"error","error":"too many frames waiting to be handled: slow down, this one was dropped"}`, w.next(t),
		"the refusal comes in its turn, once")
	send(t, ws, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, w.next(t), "the inbox takes frames again once it has room")
}

// An undelivered chat's error frame carries the chat's ref, so a client
// knows which one failed; the ref never reaches the other members.
func TestChatErrorsEchoTheRef(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dialIn(t, "alice", "lobby")
	w := listen(ws)
	send(t, ws, `{"type":"chat","channel":"room","text":"hi","ref":"c-1"}`)
	w.until(t, `{"type":"error","error":"not a member of the channel: join it first","channel":"room","ref":"c-1"}`)
	send(t, ws, `{"type":"chat","channel":"lobby","text":"hi","ref":{"n":2}}`)
	w.until(t, `{"type":"chat","channel":"lobby","from":"alice","text":"hi"}`)
}

// An activity frame takes effect after the chats and typing frames sent
// before it, however long the engine holds them: a user who types and then
// says it is away is away.
func TestActivityFollowsTheChatsBeforeIt(t *testing.T) {
	e := &stallingEngine{Engine: presence.NewMemoryEngine(), gate: make(chan struct{})}
	cfg := testConfig()
	cfg.Engine = e
	s := startServerWith(t, cfg, serverOptions{handover: 10 * waitLong}) // no chat gives up, however slow the machine
	ws, _ := s.dialIn(t, "alice", "lobby")
	w := listen(ws)
	state := func() string {
		var p struct{ State string }
		s.getJSON(t, "/api/presence/alice", &p)
		return p.State
	}
	send(t, ws, `{"type":"chat","channel":"lobby","text":"brb"}`) // held by the engine
	send(t, ws, `{"type":"typing","channel":"lobby"}`)
	send(t, ws, `{"type":"activity","state":"away"}`)
	send(t, ws, `{"type":"ping"}`)
	s.waitMetric(t, "presenced_keepalives_total", map[string]string{"kind": "text"}, 4)
	assert.Equal(t, "active", state(), "the away waits behind the chat and the typing")
	close(e.gate)
	w.until(t, `{"type":"chat","channel":"lobby","from":"alice","text":"brb"}`)
	w.until(t, `{"type":"pong"}`)
	require.Eventually(t, func() bool { return state() == "away" }, waitLong, 10*time.Millisecond)
}
