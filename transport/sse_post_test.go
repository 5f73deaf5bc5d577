package transport_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSSEPostAnswers(t *testing.T) {
	cfg := testConfig()
	cfg.FrameRate, cfg.FrameBurst = 0.001, 3
	s := startServer(t, cfg)
	c := openSSE(t, s.httpURL(), "uid=alice", nil)
	ended := openSSE(t, s.httpURL(), "uid=bob", nil)
	status, body := s.do(t, http.MethodPost, "/api/disconnect", map[string]string{"uid": "bob"}, "")
	require.Equal(t, http.StatusNoContent, status, body)
	ended.ended(t)
	big := `{"type":"join","channel":"` + strings.Repeat("a", 4096) + `"}`

	for _, tc := range []struct {
		name, session, body string
		status              int
	}{
		{"unknown session", strings.Repeat("A", 22), `{"type":"ping"}`, http.StatusNotFound},
		{"not a session", "nope", `{"type":"ping"}`, http.StatusNotFound},
		{"ended session", ended.session, `{"type":"ping"}`, http.StatusNotFound},
		{"no frame", c.session, "\n\r\n", http.StatusBadRequest},
		{"a frame over -max-message", c.session, `{"type":"ping"}` + "\n" + big, http.StatusRequestEntityTooLarge},
		{"two frames", c.session, `{"type":"join","channel":"a"}` + "\r\n" + `{"type":"join","channel":"b"}`, http.StatusNoContent},
		// The burst of 3 is spent by the joins and this one ping; the
		// second is over the rate.
		{"over the rate", c.session, `{"type":"ping"}` + "\n" + `{"type":"ping"}`, http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := postSSE(t, s.httpURL(), tc.session, tc.body)
			assert.Equal(t, tc.status, status, body)
			if status != http.StatusNoContent {
				assert.Contains(t, body, `"error"`)
			}
		})
	}
	// What the stream got, in order: nothing of the body with the big
	// frame, both joins, the pong of the ping let through, and the error
	// frame a WebSocket gets for the first frame over the limits.
	assert.Equal(t, `{"type":"joined","channel":"a","count":1,"members":["alice"]}`, c.next(t))
	assert.Equal(t, `{"type":"joined","channel":"b","count":1,"members":["alice"]}`, c.next(t))
	assert.Equal(t, `{"type":"pong"}`, c.next(t))
	assert.Equal(t, `{"type":"error","error":"too many messages: slow down, this one was dropped"}`, c.next(t))
}

// A watch frame may be longer than -max-message, by room for a full watch
// list, as on a WebSocket.
func TestSSEPostTakesALongWatchFrame(t *testing.T) {
	s := startServer(t, testConfig())
	c := openSSE(t, s.httpURL(), "uid=alice", nil)
	uids := make([]string, 1000)
	for i := range uids {
		uids[i] = fmt.Sprintf(`"%s%04d"`, strings.Repeat("u", 60), i)
	}
	status, body := c.post(t, `{"type":"watch","uids":[`+strings.Join(uids, ",")+`]}`)
	require.Equal(t, http.StatusNoContent, status, body)
	assert.Equal(t, `{"type":"watching","online":[]}`, c.next(t))
}

// An SSE client and a WebSocket client of the same user, in the same
// channel and watching the same users, get the same frames in the same
// order, coalesced the same way, for everything the others do.
func TestSSEFramesAreAWebSocketsFrames(t *testing.T) {
	s := startServer(t, testConfig())
	c := openSSE(t, s.httpURL(), "uid=obs&channels=lobby", nil)
	ws, _ := s.dialIn(t, "obs", "lobby")
	l := listen(ws)
	send(t, ws, `{"type":"watch","uids":["bob","carol"]}`)
	status, body := c.post(t, `{"type":"watch","uids":["bob","carol"]}`)
	require.Equal(t, http.StatusNoContent, status, body)
	s.step(1)
	send(t, ws, `{"type":"ping"}`)
	l.until(t, `{"type":"pong"}`)
	c.sync(t)

	bob, _ := s.dialIn(t, "bob", "lobby")
	carol, _ := s.dial(t, "carol")
	s.step(1)
	send(t, bob, `{"type":"chat","channel":"lobby","text":"hi"}`)
	send(t, bob, `{"type":"typing","channel":"lobby"}`)
	send(t, carol, `{"type":"join","channel":"lobby"}`)
	dave, _ := s.dialIn(t, "dave", "lobby")
	require.NoError(t, dave.Close()) // in and out within the tick: netted away
	waitFor(t, func() bool { return s.user(t, "dave").Connections == 0 })
	status, body = s.do(t, http.MethodPost, "/api/publish", map[string]any{"channel": "lobby", "data": map[string]int{"n": 1}}, "")
	require.Equal(t, http.StatusNoContent, status, body)
	status, body = s.do(t, http.MethodPost, "/api/send", map[string]any{"uid": "obs", "data": "for obs"}, "")
	require.Equal(t, http.StatusNoContent, status, body)
	send(t, bob, `{"type":"set","mode":"dnd"}`)
	send(t, carol, `{"type":"ping"}`)
	readUntil(t, carol, `{"type":"pong"}`)
	s.step(1)
	require.NoError(t, bob.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(waitLong)))
	waitFor(t, func() bool { return s.user(t, "bob").Connections == 0 })
	s.step(1)

	// Each asks for a pong last: everything before it is in.
	send(t, ws, `{"type":"ping"}`)
	status, body = c.post(t, `{"type":"ping"}`)
	require.Equal(t, http.StatusNoContent, status, body)
	var got, want []string
	for f := ""; f != `{"type":"pong"}`; {
		f = l.next(t)
		want = append(want, f)
	}
	for f := ""; f != `{"type":"pong"}`; {
		f = c.next(t)
		got = append(got, f)
	}
	assert.Equal(t, want, got)
	assert.Greater(t, len(want), 8, "the frames compared: %q", want)
}

// waitFor waits until cond holds, failing after waitLong.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, waitLong, 5*time.Millisecond)
}
