package transport_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// POST /api/disconnect closes every WebSocket of the user with 4403 and no
// one else's; it takes the API key as the rest of the server API does.
func TestHTTPDisconnect(t *testing.T) {
	cfg := testConfig()
	cfg.APIKey = "k3y"
	s := startServer(t, cfg)
	key := "apikey k3y"
	mallory1, _ := s.dial(t, "mallory")
	mallory2, _ := s.dial(t, "mallory")
	bob, _ := s.dial(t, "bob")

	for _, tc := range []struct {
		name, body, auth string
		code             int
		err              string
	}{
		{"no key", `{"uid":"mallory"}`, "", 401, "apikey"},
		{"wrong key", `{"uid":"mallory"}`, "apikey nope", 401, "apikey"},
		{"not JSON", `{"uid":`, key, 400, "JSON"},
		{"not an object", `["mallory"]`, key, 400, "JSON"},
		{"trailing data", `{"uid":"mallory"} {}`, key, 400, "one JSON object"},
		{"no uid", `{}`, key, 400, "user ID"},
		{"bad uid", `{"uid":"a b"}`, key, 400, "user ID"},
		{"reason not a string", `{"uid":"mallory","reason":1}`, key, 400, "JSON"},
		{"reason too long", `{"uid":"mallory","reason":"` + strings.Repeat("x", 124) + `"}`, key, 400, "reason"},
		{"over 64 KiB", `{"uid":"mallory","pad":"` + strings.Repeat("x", 64<<10) + `"}`, key, 413, "64 KiB"},
		{"an offline user", `{"uid":"nobody"}`, key, 204, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := s.do(t, http.MethodPost, "/api/disconnect", tc.body, tc.auth)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, msg, tc.err)
		})
	}
	assert.True(t, s.online(t, "mallory"), "the refused calls closed nothing")

	code, _ := s.do(t, http.MethodPost, "/api/disconnect", `{"uid":"mallory","reason":"`+strings.Repeat("x", 123)+`"}`, key)
	require.Equal(t, http.StatusNoContent, code)
	for _, ws := range []*websocket.Conn{mallory1, mallory2} {
		ce := readClose(t, ws)
		assert.Equal(t, protocol.CloseDisconnected, ce.Code)
		assert.Equal(t, protocol.ReasonDisconnected, ce.Text)
	}
	require.Eventually(t, func() bool { return !s.online(t, "mallory") }, waitLong, time.Millisecond)
	send(t, bob, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, readRaw(t, bob), "bob stays")

	// With user tokens and no key the server API is off; in demo mode, open.
	code, msg := startServer(t, jwtConfig()).do(t, http.MethodPost, "/api/disconnect", `{"uid":"bob"}`, "")
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, msg, "API key")
	demo := startServer(t, testConfig())
	alice, _ := demo.dial(t, "alice")
	code, _ = demo.do(t, http.MethodPost, "/api/disconnect", `{"uid":"alice"}`, "")
	assert.Equal(t, http.StatusNoContent, code)
	assert.Equal(t, protocol.CloseDisconnected, readClose(t, alice).Code)
}
