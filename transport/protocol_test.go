package transport_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// The protocol over a real listener, frame by frame. The ring steps only
// when a test says so, so "within one tick" is exact.

func TestWelcomeThenJoinedPerChannel(t *testing.T) {
	s := startServer(t, testConfig())
	ws := s.dialRaw(t, "uid=carol&channels=lobby,room-1,lobby", nil)
	assert.Equal(t, `{"type":"welcome","uid":"carol","timeout_ms":3000,"protocol":"`+protocol.Version+`"}`, readRaw(t, ws))
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":1,"members":["carol"]}`, readRaw(t, ws))
	assert.Equal(t, `{"type":"joined","channel":"room-1","count":1,"members":["carol"]}`, readRaw(t, ws))
	send(t, ws, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, readRaw(t, ws), "a channel listed twice is joined once")

	_, snaps := s.dialIn(t, "alice", "lobby")
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":2,"members":["alice","carol"]}`}, snaps)
}

func TestBadChannelsAtConnectAre400(t *testing.T) {
	s := startServer(t, testConfig())
	for _, q := range []string{"channels=a%20b", "channels=ok,", "channels=" + strings.Repeat("x", 129), "channels=%C3%A9"} {
		assert.Equal(t, http.StatusBadRequest, s.dialStatus(t, "uid=a&"+q, nil), q)
		assert.Equal(t, http.StatusBadRequest, s.heartbeat(t, "uid=a&"+q, nil), q)
	}
}

func TestJoinLeaveAndSnapshots(t *testing.T) {
	cfg := testConfig()
	cfg.MemberList = 2
	s := startServer(t, cfg)
	for _, uid := range []string{"b", "c", "d"} {
		s.dialIn(t, uid, "lobby")
	}
	ws, _ := s.dial(t, "a")
	send(t, ws, `{"type":"join","channel":"lobby"}`)
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":4,"members":["a","b"]}`, readRaw(t, ws),
		"members sorted and bounded, count exact")
	send(t, ws, `{"type":"join","channel":"lobby"}`)
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":4,"members":["a","b"]}`, readRaw(t, ws),
		"joining again answers the snapshot again")
	send(t, ws, `{"type":"leave","channel":"lobby"}`)
	assert.Equal(t, `{"type":"left","channel":"lobby"}`, readRaw(t, ws))

	var ch struct {
		Channel string   `json:"channel"`
		Count   int      `json:"count"`
		Members []string `json:"members"`
	}
	require.Equal(t, http.StatusOK, s.getJSON(t, "/api/channels/lobby?limit=2", &ch))
	assert.Equal(t, "lobby", ch.Channel)
	assert.Equal(t, 3, ch.Count)
	assert.Equal(t, []string{"b", "c"}, ch.Members)
	require.Equal(t, http.StatusOK, s.getJSON(t, "/api/channels/empty", &ch))
	assert.Equal(t, 0, ch.Count)
	assert.Equal(t, []string{}, ch.Members)
	assert.Equal(t, http.StatusBadRequest, s.getJSON(t, "/api/channels/a%20b", nil))
	assert.Equal(t, http.StatusBadRequest, s.getJSON(t, "/api/channels/lobby?limit=x", nil))
}

func TestChatReachesTheChannelOnly(t *testing.T) {
	s := startServer(t, testConfig())
	alice, _ := s.dialIn(t, "alice", "lobby")
	alice2, _ := s.dialIn(t, "alice", "lobby")
	bob, _ := s.dialIn(t, "bob", "lobby", "room")
	carol, _ := s.dialIn(t, "carol", "room")
	send(t, alice, `{"type":"chat","channel":"lobby","text":"hi <b>","from":"mallory"}`)
	want := `{"type":"chat","channel":"lobby","from":"alice","text":"hi \u003cb\u003e"}`
	for _, ws := range []*websocket.Conn{alice, alice2, bob} {
		assert.Equal(t, want, readRaw(t, ws))
	}
	send(t, carol, `{"type":"chat","channel":"room","text":"x"}`)
	assert.Equal(t, `{"type":"chat","channel":"room","from":"carol","text":"x"}`, readRaw(t, carol),
		"carol got nothing from the lobby")
	send(t, carol, `{"type":"chat","channel":"lobby","text":"let me in"}`)
	f := readFrame(t, carol)
	assert.Equal(t, "error", f["type"])
	assert.Equal(t, "lobby", f["channel"])
	assert.Contains(t, f["error"], "join it first")
	assert.Equal(t, `{"type":"chat","channel":"room","from":"carol","text":"x"}`, readRaw(t, bob))
}

func TestBadFramesGetErrorAndConnectionStays(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dial(t, "alice")
	for _, tc := range []struct{ name, frame, want string }{
		{"not JSON", `hello`, "invalid JSON"},
		{"truncated", `{"type":"chat"`, "invalid JSON"},
		{"array", `[1,2]`, "a frame is a JSON object"},
		{"text not a string", `{"type":"chat","channel":"x","text":5}`, `"text" must be a string`},
		{"unknown type", `{"type":"dance"}`, `unknown type "dance"`},
		{"no type", `{"text":"x"}`, `missing "type"`},
		{"chat without channel", `{"type":"chat","text":"x"}`, `chat needs a "channel"`},
		{"chat with empty text", `{"type":"chat","channel":"x","text":""}`, `non-empty "text"`},
		{"bad channel", `{"type":"join","channel":"a b"}`, "invalid channel name"},
		{"watch without list", `{"type":"watch"}`, `watch needs "uids"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send(t, ws, tc.frame)
			f := readFrame(t, ws)
			assert.Equal(t, "error", f["type"])
			assert.Contains(t, f["error"], tc.want)
			send(t, ws, `{"type":"ping"}`)
			assert.Equal(t, `{"type":"pong"}`, readRaw(t, ws), "the connection stays open")
		})
	}
}

// Several joins inside one tick reach an observer as one diff; a join and a
// leave of the same user inside one tick reach it as nothing.
func TestDiffsAreCoalescedPerTick(t *testing.T) {
	s := startServer(t, testConfig())
	obs, _ := s.dialIn(t, "obs", "lobby")
	w := listen(obs)
	for _, uid := range []string{"dave", "bob", "carol"} {
		s.dialIn(t, uid, "lobby")
	}
	flash, _ := s.dialIn(t, "flash", "lobby")
	flash.Close()
	s.waitMetric(t, "presenced_connections", nil, 4)
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"lobby","count":4,"joins":["bob","carol","dave"],"leaves":[]}`, w.next(t))

	ws, _ := s.dial(t, "eve")
	send(t, ws, `{"type":"join","channel":"lobby"}`)
	send(t, ws, `{"type":"leave","channel":"lobby"}`)
	readUntil(t, ws, `{"type":"left","channel":"lobby"}`)
	s.step(1)
	w.sync(t)
	s.step(1)
	send(t, obs, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, w.next(t), "no diff for a join and leave inside one tick")
}

func TestTwoTabsOfOneUserInOneChannel(t *testing.T) {
	s := startServer(t, testConfig())
	obs, _ := s.dialIn(t, "obs", "lobby")
	w := listen(obs)
	tab1, _ := s.dialIn(t, "alice", "lobby")
	tab2, snaps := s.dialIn(t, "alice", "lobby")
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":2,"members":["alice","obs"]}`}, snaps)
	s.step(1)
	w.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":["alice"],"leaves":[]}`)
	assert.Equal(t, 2, s.user(t, "alice").Connections)

	tab1.Close()
	s.waitMetric(t, "presenced_connections", nil, 2)
	s.step(1)
	send(t, tab2, `{"type":"chat","channel":"lobby","text":"still here"}`)
	assert.Equal(t, `{"type":"chat","channel":"lobby","from":"alice","text":"still here"}`, w.next(t),
		"closing one tab is no leave")
	tab2.Close()
	s.waitMetric(t, "presenced_connections", nil, 1)
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}`, w.next(t))
	assert.Equal(t, userPresence{UID: "alice"}, s.user(t, "alice"))
}

// A member that goes silent is closed at the timeout and leaves its
// channels in the same tick.
func TestIdleMemberLeavesItsChannelsOnTimeout(t *testing.T) {
	s := startServer(t, testConfig())
	obs, _ := s.dialIn(t, "obs", "lobby", "room")
	w := listen(obs)
	idle, _ := s.dialIn(t, "idler", "lobby", "room")
	idle.SetPingHandler(func(string) error { return nil }) // a dead client: no pong
	s.step(1)
	w.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":["idler"],"leaves":[]}`)
	w.until(t, `{"type":"presence","channel":"room","count":2,"joins":["idler"],"leaves":[]}`)
	w.sync(t)
	s.step(29)
	w.sync(t)
	s.step(1) // the 31st step after the idler's last frame
	got := []string{w.next(t), w.next(t)}
	assert.ElementsMatch(t, []string{
		`{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["idler"]}`,
		`{"type":"presence","channel":"room","count":1,"joins":[],"leaves":["idler"]}`,
	}, got)
	assert.Equal(t, protocol.CloseIdleTimeout, readClose(t, idle).Code)
}

func TestLargeChannelsGetCountOnlyDiffs(t *testing.T) {
	cfg := testConfig()
	cfg.PresenceLists = 3
	s := startServer(t, cfg)
	obs, _ := s.dialIn(t, "obs", "big")
	w := listen(obs)
	var conns []*websocket.Conn
	for i := range 4 {
		ws, _ := s.dialIn(t, fmt.Sprintf("u%d", i), "big")
		conns = append(conns, ws)
	}
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"big","count":5}`, w.next(t))
	conns[0].Close()
	s.dialIn(t, "u9", "big")
	s.waitMetric(t, "presenced_connections", nil, 5)
	s.step(1)
	send(t, obs, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, w.next(t), "count unchanged: no diff")
	conns[1].Close()
	s.waitMetric(t, "presenced_connections", nil, 4)
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"big","count":4}`, w.next(t))
}

func TestWatchListsGetStatusFrames(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dial(t, "w")
	w := listen(ws)
	bob, _ := s.dial(t, "bob")
	send(t, ws, `{"type":"watch","uids":["carol","bob"]}`)
	assert.Equal(t, `{"type":"watching","online":["bob"]}`, w.next(t))
	s.dial(t, "carol")
	s.dial(t, "dave")
	bob.Close()
	s.waitMetric(t, "presenced_connections", nil, 3)
	s.step(1)
	assert.Equal(t, `{"type":"status","online":["carol"],"offline":["bob"]}`, w.next(t))

	send(t, ws, `{"type":"watch","uids":[]}`)
	assert.Equal(t, `{"type":"watching","online":[]}`, w.next(t))
	s.dial(t, "bob")
	s.step(1)
	send(t, ws, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, w.next(t), "an empty list watches nobody")

	send(t, ws, `{"type":"watch","uids":[`+strings.Repeat(`"u",`, 1000)+`"u"]}`)
	assert.Contains(t, w.next(t), "watch list too long")
}

// A connection in no channel, watching nobody, receives nothing while
// hundreds of others come, chat and go over many ticks.
func TestQuietConnectionReceivesNothing(t *testing.T) {
	s := startServer(t, testConfig())
	quiet, _ := s.dial(t, "quiet")
	q := listen(quiet)
	obs, _ := s.dialIn(t, "obs", "lobby")
	o := listen(obs)
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				ws, err := s.connect(dialer(0), fmt.Sprintf("u%d-%d", g, i), "lobby", fmt.Sprintf("room-%d", i%3))
				if err != nil {
					errs <- err
					return
				}
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"chat","channel":"lobby","text":"hi"}`))
				_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"watch","uids":["quiet"]}`))
				ws.Close()
				if i%15 == 0 {
					s.hub.Step() // 20 steps in all: the two listeners never idle out
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return metric(t, s.reg, "presenced_connections", nil) == 2 }, waitLong, time.Millisecond)
	s.step(1)
	o.sync(t)
	send(t, quiet, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, q.next(t), "the quiet connection got nothing before its own pong")
	assert.Contains(t, o.next(t), `"channel":"lobby"`, "while the observer in the lobby heard of them")
}
