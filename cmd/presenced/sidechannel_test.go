package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With a JWT secret and an API key, an invisible user's second tab shows
// to no keyless reader: /metrics answers only the key, and /api/ring's due
// counts come only with it. /healthz and /readyz stay open.
func TestCountsOfAnInvisibleUserNeedTheKey(t *testing.T) {
	const secret, key = "s3cret", "k-123"
	addr, _ := startRun(t, []string{"-jwt-secret", secret, "-api-key", key}, nil)
	base := "http://" + addr
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	require.NoError(t, err)
	dial := func() *websocket.Conn {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?token="+tok, nil)
		require.NoError(t, err)
		t.Cleanup(func() { ws.Close() })
		_, _, err = ws.ReadMessage() // welcome
		require.NoError(t, err)
		return ws
	}
	alice := dial()
	require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte(`{"type":"set","mode":"invisible"}`)))
	require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)))
	for {
		_, f, err := alice.ReadMessage()
		require.NoError(t, err)
		if string(f) == `{"type":"pong"}` {
			break
		}
	}
	dial()

	call := func(path, auth string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, auth string
		code       int
		has, hasNo string
	}{
		{"/metrics", "", http.StatusUnauthorized, `"error"`, "presenced_connections"},
		{"/metrics", "apikey wrong", http.StatusUnauthorized, `"error"`, "presenced_connections"},
		{"/metrics", "apikey " + key, http.StatusOK, "presenced_connections 2", ""},
		{"/api/ring", "", http.StatusOK, `"cursor":`, `"due"`},
		{"/api/ring", "apikey " + key, http.StatusOK, `"due":[`, ""},
		{"/api/presence/alice", "", http.StatusUnauthorized, `"error"`, "alice"},
		{"/healthz", "", http.StatusOK, `"ok"`, ""},
		{"/readyz", "", http.StatusOK, `"ok"`, ""},
	} {
		code, body := call(tc.path, tc.auth)
		assert.Equal(t, tc.code, code, "%s with %q: %s", tc.path, tc.auth, body)
		assert.Contains(t, body, tc.has, "%s with %q", tc.path, tc.auth)
		if tc.hasNo != "" {
			assert.False(t, strings.Contains(body, tc.hasNo), "%s with %q: has %s", tc.path, tc.auth, tc.hasNo)
		}
	}
}
