package transport_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

type eventsPage struct {
	Events []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		UID     string `json:"uid"`
		Channel string `json:"channel"`
		Mode    string `json:"mode"`
		At      int64  `json:"at"`
	} `json:"events"`
	Next string `json:"next"`
}

func (s *testServer) events(t *testing.T, after string, limit string) (int, eventsPage, string) {
	t.Helper()
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit != "" {
		q.Set("limit", limit)
	}
	code, body := s.getBody(t, "/api/events?"+q.Encode(), "apikey k")
	var page eventsPage
	if code == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(body), &page))
	}
	return code, page, body
}

// A backend that took a snapshot reads the edges after its cursor: those
// made since, in order, with the ids the webhook sends, invisible users'
// real ones included; and the same cursor again once nothing is newer.
func TestEventsReplayFromASnapshotsCursor(t *testing.T) {
	cfg := testConfig()
	cfg.APIKey = "k"
	var mu sync.Mutex
	var hooked []presence.Edge
	cfg.OnEdges = func(edges []presence.Edge) {
		mu.Lock()
		hooked = append(hooked, edges...)
		mu.Unlock()
	}
	s := startServer(t, cfg)
	bob, _ := s.dialIn(t, "bob", "lobby")
	s.step(1)

	var snap struct {
		Count  int      `json:"count"`
		Users  []string `json:"users"`
		Cursor string   `json:"cursor"`
	}
	_, body := s.getBody(t, "/api/presence", "apikey k")
	require.NoError(t, json.Unmarshal([]byte(body), &snap))
	assert.Equal(t, []string{"bob"}, snap.Users)
	require.NotEmpty(t, snap.Cursor, "with the key a snapshot names its cursor")

	alice, _ := s.dialIn(t, "alice", "lobby")
	send(t, alice, `{"type":"set","mode":"invisible"}`)
	w := listen(alice)
	w.sync(t)
	require.NoError(t, bob.Close())
	require.Eventually(t, func() bool {
		_, body := s.getBody(t, "/api/presence/bob", "apikey k")
		return !json.Valid([]byte(body)) || !jsonHas(body, `"online":true`)
	}, waitLong, 10*time.Millisecond, "bob's close is seen")
	s.step(1)

	code, page, _ := s.events(t, snap.Cursor, "")
	require.Equal(t, http.StatusOK, code)
	var got []string
	for _, e := range page.Events {
		got = append(got, e.Type+" "+e.UID+" "+e.Channel+" "+e.Mode)
	}
	assert.Equal(t, []string{"online alice  ", "join alice lobby ", "update alice  invisible", "leave bob lobby ", "offline bob  "}, got,
		"the edges after the snapshot, in the order made, the invisible user's too")

	// Each as the webhook carried it: the same ids. OnEdges hears them
	// on a goroutine of its own, after the tick.
	byID := map[string]bool{}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range hooked {
			byID[e.ID] = true
		}
		for _, e := range page.Events {
			if !byID[e.ID] {
				return false
			}
		}
		return true
	}, waitLong, 10*time.Millisecond, "OnEdges hears the replayed edges")
	mu.Lock()
	var ids []string
	for _, e := range hooked[len(hooked)-len(page.Events):] {
		ids = append(ids, e.ID)
	}
	mu.Unlock()
	var replayed []string
	for _, e := range page.Events {
		replayed = append(replayed, e.ID)
	}
	assert.Equal(t, ids, replayed)

	code, again, _ := s.events(t, page.Next, "")
	require.Equal(t, http.StatusOK, code)
	assert.Empty(t, again.Events)
	assert.Equal(t, page.Next, again.Next, "nothing newer: the same cursor")

	// Pages of one read on where the last stopped.
	code, first, _ := s.events(t, snap.Cursor, "2")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, first.Events, 2)
	_, rest, _ := s.events(t, first.Next, "")
	assert.Equal(t, page.Events, append(first.Events, rest.Events...))

	// From the oldest kept: bob's arrival first.
	_, all, _ := s.events(t, "", "1000")
	require.NotEmpty(t, all.Events)
	assert.Equal(t, "online", all.Events[0].Type)
	assert.Equal(t, "bob", all.Events[0].UID)
}

// A cursor the log cannot answer from is 410 with the oldest it answers
// from; bad limits and an over-long cursor are 400.
func TestEventsRefusals(t *testing.T) {
	cfg := testConfig()
	cfg.APIKey = "k"
	cfg.Engine, _ = presence.NewMemoryEngineWith(presence.LogConfig{Max: 2})
	s := startServer(t, cfg)
	for _, uid := range []string{"a", "b", "c"} {
		ws, _ := s.dial(t, uid)
		defer ws.Close()
	}
	s.step(1)

	code, body := s.getBody(t, "/api/events?after=not-a-cursor", "apikey k")
	require.Equal(t, http.StatusGone, code, body)
	var gone struct {
		Error  string `json:"error"`
		Oldest string `json:"oldest"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &gone))
	assert.Contains(t, gone.Error, "snapshot")
	code, page, _ := s.events(t, gone.Oldest, "")
	require.Equal(t, http.StatusOK, code, "oldest answers")
	assert.Len(t, page.Events, 2, "Max kept")

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after=" + strings.Repeat("x", 5000)} {
		code, _ := s.do(t, http.MethodGet, "/api/events?"+q, nil, "apikey k")
		assert.Equal(t, http.StatusBadRequest, code, q)
	}
	code, _ = s.do(t, http.MethodGet, "/api/events", nil, "apikey wrong")
	assert.Equal(t, http.StatusUnauthorized, code)
}

// Without an API key the log answers nobody, even in demo mode, where the
// rest of the server API is open: it tells what invisible users did.
func TestEventsNeedTheKeyEvenInDemoMode(t *testing.T) {
	cfg := testConfig()
	cfg.Auth = transport.DemoAuth()
	s := startServer(t, cfg)
	code, msg := s.getError(t, "/api/events")
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, msg, "API key")
	_, body := s.getBody(t, "/api/presence", "")
	assert.NotContains(t, body, "cursor", "a keyless snapshot names no cursor")
}

func jsonHas(body, part string) bool { return strings.Contains(body, part) }

// withCursor is body with its "cursor", which must be there, said as
// CURSOR: the place in the log is the engine's, not the test's.
func withCursor(t *testing.T, body string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m))
	require.NotEmpty(t, m["cursor"], "a listing with the key names its cursor")
	m["cursor"] = "CURSOR"
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return string(out)
}
