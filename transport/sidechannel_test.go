package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keylessUser is what GET /api/presence/{uid} answers without the key.
type keylessUser struct {
	Online   bool            `json:"online"`
	State    string          `json:"state"`
	LastSeen int64           `json:"last_seen"`
	Mode     string          `json:"mode"`
	Note     json.RawMessage `json:"note"`
}

func (s *testServer) keyless(t *testing.T, uid string) keylessUser {
	t.Helper()
	var u keylessUser
	require.Equal(t, http.StatusOK, s.getJSON(t, "/api/presence/"+uid, &u))
	return u
}

// watchLastSeen starts watching uid from ws and returns the watching
// frame's last seen of it (0: none).
func watchLastSeen(t *testing.T, ws *websocket.Conn, uid string) int64 {
	t.Helper()
	send(t, ws, `{"type":"watch","uids":["`+uid+`"]}`)
	var w struct {
		Type     string
		Online   []string
		LastSeen map[string]int64 `json:"last_seen"`
	}
	require.NoError(t, json.Unmarshal([]byte(readRaw(t, ws)), &w))
	require.Equal(t, "watching", w.Type)
	require.Empty(t, w.Online)
	return w.LastSeen[uid]
}

// An invisible user who then leaves is last seen, without the key, when
// it turned invisible, as the watching frame says; and a note it set while
// invisible shows nowhere: a user seen offline shows its info only.
func TestKeylessAnswerOfAnInvisibleUserWhoLeft(t *testing.T) {
	s := startServer(t, testConfig())
	alice, _ := s.dial(t, "alice")
	wa := listen(alice)
	send(t, alice, `{"type":"set","mode":"invisible"}`)
	wa.sync(t)
	bob, _ := s.dial(t, "bob")
	hidden := s.keyless(t, "alice")
	require.False(t, hidden.Online)
	require.NotZero(t, hidden.LastSeen, "last seen when she turned invisible")
	assert.Equal(t, hidden.LastSeen, watchLastSeen(t, bob, "alice"))

	send(t, alice, `{"type":"set","note":{"text":"here all along"}}`)
	wa.sync(t)
	assert.Equal(t, keylessUser{State: "offline", LastSeen: hidden.LastSeen}, s.keyless(t, "alice"), "the note set while invisible")

	// Her close comes later than her turning invisible, by the clock.
	require.Eventually(t, func() bool { return time.Now().UnixMilli() > hidden.LastSeen+20 }, waitLong, time.Millisecond)
	require.NoError(t, alice.Close())
	require.Eventually(t, func() bool {
		n, err := s.hub.Online(context.Background(), "alice")
		require.NoError(t, err)
		return n == 0
	}, waitLong, time.Millisecond)
	s.step(1)
	assert.Equal(t, keylessUser{State: "offline", LastSeen: hidden.LastSeen}, s.keyless(t, "alice"), "after she left")
	assert.Equal(t, hidden.LastSeen, watchLastSeen(t, bob, "alice"))
}

// With an API key, the ring's due counts and the metrics, which count
// invisible users' connections too, need the key; the ring's shape and
// cursor, all the demo page draws without it, do not.
func TestCountsNeedTheKey(t *testing.T) {
	cfg := testConfig()
	cfg.APIKey = "k"
	s := startServer(t, cfg)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.hub.RequireKey(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})))
	metrics := httptest.NewServer(mux)
	t.Cleanup(metrics.Close)
	alice, _ := s.dial(t, "alice")
	wa := listen(alice)
	send(t, alice, `{"type":"set","mode":"invisible"}`)
	wa.sync(t)
	// Another tab: what showed it was the counts moving 1 -> 2.
	s.dial(t, "alice")

	type ring struct {
		Slots  int   `json:"slots"`
		TickMS int   `json:"tick_ms"`
		Cursor *int  `json:"cursor"`
		Due    []int `json:"due"`
	}
	var keyless, keyed ring
	code, body := s.getBody(t, "/api/ring", "")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &keyless))
	assert.Equal(t, 31, keyless.Slots)
	assert.Equal(t, 100, keyless.TickMS)
	assert.NotNil(t, keyless.Cursor)
	assert.NotContains(t, body, "due", "keyless: no due counts")

	code, body = s.getBody(t, "/api/ring", "apikey k")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &keyed))
	total := 0
	for _, n := range keyed.Due {
		total += n
	}
	assert.Equal(t, 2, total, "with the key: both of her connections")

	m := &testServer{srv: metrics}
	get := func(auth string) (int, string) { return m.getBody(t, "/metrics", auth) }
	code, body = get("")
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.NotContains(t, body, "presenced_connections")
	code, _ = get("apikey wrong")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, body = get("apikey k")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "presenced_connections 2")

	// Without a key the counts are open, as the docs say.
	open := startServer(t, testConfig())
	code, body = open.getBody(t, "/api/ring", "")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"due":[`)
}
