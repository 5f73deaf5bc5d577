package transport_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (s *testServer) httpURL() string { return "http://" + s.addr }

func TestSSEWelcomeCarriesASession(t *testing.T) {
	s := startServer(t, testConfig())
	c := openSSE(t, s.httpURL(), "uid=alice&channels=lobby", nil)
	assert.Equal(t, "text/event-stream", c.resp.Header.Get("Content-Type"))
	assert.Equal(t, "no-cache", c.resp.Header.Get("Cache-Control"))
	assert.Equal(t, "no", c.resp.Header.Get("X-Accel-Buffering"))
	assert.Equal(t, "alice", c.welcome["uid"])
	assert.EqualValues(t, 3000, c.welcome["timeout_ms"])
	random, err := base64.RawURLEncoding.DecodeString(c.session[strings.LastIndexByte(c.session, '.')+1:])
	require.NoError(t, err)
	assert.Len(t, random, 16, "128 random bits")
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":1,"members":["alice"]}`, c.next(t))

	// A second stream of the same user is another connection, as a second
	// tab is; a WebSocket's welcome has no session.
	c2 := openSSE(t, s.httpURL(), "uid=alice", nil)
	assert.NotEqual(t, c.session, c2.session)
	_, welcome := s.dial(t, "alice")
	assert.NotContains(t, welcome, "session")
	assert.Equal(t, 3, s.user(t, "alice").Connections)
}

func TestSSERefusesAsWebSocketsDo(t *testing.T) {
	cfg := testConfig()
	cfg.MaxConnsPerUser = 1
	cfg.Origins = []string{"https://app.example.com"}
	s := startServer(t, cfg)
	for _, tc := range []struct {
		name, query string
		header      http.Header
		status      int
	}{
		{"no user", "", nil, http.StatusBadRequest},
		{"bad user", "uid=a%20b", nil, http.StatusBadRequest},
		{"bad channel", "uid=alice&channels=a%20b", nil, http.StatusBadRequest},
		{"foreign origin", "uid=alice", http.Header{"Origin": {"https://evil.example.com"}}, http.StatusForbidden},
		{"foreign host", "uid=alice", http.Header{"Host": {"evil.example.com"}}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, status, body := dialSSE(t, s.httpURL(), tc.query, tc.header)
			assert.Equal(t, tc.status, status, body)
		})
	}
	c := openSSE(t, s.httpURL(), "uid=alice", http.Header{"Origin": {"https://app.example.com"}})
	assert.Equal(t, "https://app.example.com", c.resp.Header.Get("Access-Control-Allow-Origin"))
	_, status, body := dialSSE(t, s.httpURL(), "uid=alice", nil)
	assert.Equal(t, http.StatusTooManyRequests, status, body, "-max-conns-per-user counts streams")
}

func TestSSEPostIsCORSForAllowedOrigins(t *testing.T) {
	cfg := testConfig()
	cfg.Origins = []string{"https://app.example.com"}
	s := startServer(t, cfg)
	c := openSSE(t, s.httpURL(), "uid=alice", nil)
	preflight := func(origin string) *http.Response {
		req, err := http.NewRequest(http.MethodOptions, s.httpURL()+"/sse/"+c.session, nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp := preflight("https://app.example.com")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, "https://app.example.com", resp.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "POST")
	assert.Equal(t, http.StatusForbidden, preflight("https://evil.example.com").StatusCode)

	post := func(origin string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, s.httpURL()+"/sse/"+c.session, strings.NewReader(`{"type":"ping"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp = post("https://app.example.com")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, "https://app.example.com", resp.Header.Get("Access-Control-Allow-Origin"))
	c.until(t, `{"type":"pong"}`)
	assert.Equal(t, http.StatusForbidden, post("https://evil.example.com").StatusCode, "a form on another site cannot post")
}

func TestSSEKeepaliveComments(t *testing.T) {
	s := startServer(t, testConfig())
	s.hub.SetSSEKeepalive(20 * time.Millisecond)
	c := openSSE(t, s.httpURL(), "uid=alice", nil)
	for range 3 {
		select {
		case line := <-c.comments:
			assert.Equal(t, ": keepalive", line)
		case <-time.After(waitLong):
			require.FailNow(t, "no keepalive comment")
		}
	}
}

// The server's read and write timeouts, which cmd/presenced sets, do not
// cut a stream that only listens.
func TestSSEOutlivesTheServersTimeouts(t *testing.T) {
	s := startServerWith(t, testConfig(), serverOptions{timeouts: 100 * time.Millisecond})
	s.hub.SetSSEKeepalive(20 * time.Millisecond)
	c := openSSE(t, s.httpURL(), "uid=alice", nil)
	for range 20 { // 400 ms
		<-c.comments
	}
	c.sync(t)
}

func TestSSEIdleClosesWith4408(t *testing.T) {
	s := startServer(t, testConfig())
	s.hub.SetSSEKeepalive(10 * time.Millisecond) // comments flow, and do not count
	c := openSSE(t, s.httpURL(), "uid=alice", nil)
	s.step(20)
	c.sync(t) // a POST is a keepalive
	s.step(20)
	<-c.comments
	c.sync(t)
	s.step(31)
	assert.Equal(t, `{"type":"close","code":4408,"reason":"idle timeout"}`, c.ended(t))
	assert.Equal(t, 0, s.user(t, "alice").Connections)
	status, body := c.post(t, `{"type":"ping"}`)
	assert.Equal(t, http.StatusNotFound, status, body)
}

func TestSSEShutdownClosesWith1001(t *testing.T) {
	s := startServer(t, testConfig())
	c := openSSE(t, s.httpURL(), "uid=alice", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	require.NoError(t, s.hub.Shutdown(ctx))
	assert.Equal(t, `{"type":"close","code":1001,"reason":"server shutdown"}`, c.ended(t))
}

func TestSSEDisconnectClosesWith4403(t *testing.T) {
	s := startServer(t, testConfig())
	c := openSSE(t, s.httpURL(), "uid=mallory", nil)
	other := openSSE(t, s.httpURL(), "uid=alice", nil)
	status, body := s.do(t, http.MethodPost, "/api/disconnect", map[string]string{"uid": "mallory"}, "")
	require.Equal(t, http.StatusNoContent, status, body)
	assert.Equal(t, `{"type":"close","code":4403,"reason":"disconnected"}`, c.ended(t))
	other.sync(t)
}
