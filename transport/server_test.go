package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

// What a chat backend drives: the Go and HTTP server API, tokens over a
// connection's life, the embedder's hooks.

// token signs claims with jwtSecret.
func token(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	return signed(t, jwt.SigningMethodHS256, jwtSecret, claims)
}

func jwtConfig() transport.Config {
	cfg := testConfig()
	cfg.Slots = 301 // a 30 s timeout in steps: nobody idles out while tokens expire
	cfg.Auth = transport.JWTAuth(jwtSecret)
	return cfg
}

func TestTokenExpiryClosesWith4401(t *testing.T) {
	s := startServer(t, jwtConfig())
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second) // 2-3 s ahead
	ws := s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "bob", "exp": exp.Unix()}), nil)
	w := listen(ws)
	assert.Equal(t, `{"type":"welcome","uid":"bob","timeout_ms":30000,"protocol":"`+protocol.Version+`"}`, w.next(t))
	steps := 0
	for steps < 40 && w.syncOrClosed(t) {
		s.hub.Step()
		steps++
	}
	var ce *websocket.CloseError
	require.ErrorAs(t, w.closed(t), &ce)
	assert.Equal(t, protocol.CloseTokenExpired, ce.Code)
	assert.Equal(t, "token expired", ce.Text)
	assert.GreaterOrEqual(t, steps, 20, "not before exp: at least 2 s of 100 ms steps")
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "expired"}))
}

func TestRefreshExtendsTheSession(t *testing.T) {
	s := startServer(t, jwtConfig())
	soon := time.Now().Add(2 * time.Second).Unix()
	ws := s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "bob", "exp": soon}), nil)
	w := listen(ws)
	w.until(t, `{"type":"welcome","uid":"bob","timeout_ms":30000,"protocol":"`+protocol.Version+`"}`)

	for _, tc := range []struct{ frame, want string }{
		{`{"type":"refresh","token":"` + token(t, jwt.MapClaims{"sub": "eve", "exp": time.Now().Add(time.Hour).Unix()}) + `"}`, "another user"},
		{`{"type":"refresh","token":"garbage"}`, "refresh refused"},
		{`{"type":"refresh","token":"` + token(t, jwt.MapClaims{"sub": "bob"}) + `"}`, "refresh refused"},
		{`{"type":"refresh"}`, `refresh needs a "token"`},
	} {
		send(t, ws, tc.frame)
		var f map[string]string
		require.NoError(t, json.Unmarshal([]byte(w.next(t)), &f))
		assert.Equal(t, "error", f["type"])
		assert.Contains(t, f["error"], tc.want)
	}
	send(t, ws, `{"type":"refresh","token":"`+token(t, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()})+`"}`)
	for range 50 { // 5 s of steps, well past the first token's exp
		w.sync(t)
		s.hub.Step()
	}
	w.sync(t)
	assert.True(t, s.online(t, "bob"), "a refreshed connection stays")
}

func TestTokenRules(t *testing.T) {
	s := startServer(t, jwtConfig())
	hour := time.Now().Add(time.Hour).Unix()
	assert.Equal(t, http.StatusUnauthorized, s.dialStatus(t, "token="+token(t, jwt.MapClaims{"sub": "bob"}), nil), "exp is required")
	// Another Authorization scheme, e.g. from a proxy, does not hide ?token=.
	ws := s.dialRaw(t, "token="+token(t, jwt.MapClaims{"sub": "bob", "exp": hour}), http.Header{"Authorization": {"Basic eDp5"}})
	assert.Equal(t, "welcome", readFrame(t, ws)["type"])

	// The channels claim: exact names and prefixes, at connect and on join.
	tok := token(t, jwt.MapClaims{"sub": "carol", "exp": hour, "channels": []string{"lobby", "team-*"}})
	ws = s.dialRaw(t, "channels=lobby,random&token="+tok, nil)
	assert.Equal(t, "welcome", readFrame(t, ws)["type"])
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":1,"members":["carol"]}`, readRaw(t, ws))
	assert.Equal(t, `{"type":"error","error":"not allowed to join this channel","channel":"random"}`, readRaw(t, ws))
	send(t, ws, `{"type":"join","channel":"team-a"}`)
	assert.Equal(t, `{"type":"joined","channel":"team-a","count":1,"members":["carol"]}`, readRaw(t, ws))
	send(t, ws, `{"type":"join","channel":"team"}`)
	assert.Equal(t, `{"type":"error","error":"not allowed to join this channel","channel":"team"}`, readRaw(t, ws))
	assert.Equal(t, http.StatusForbidden, s.heartbeat(t, "channels=random&token="+tok, nil))
	assert.Equal(t, http.StatusNoContent, s.heartbeat(t, "channels=team-b&token="+tok, nil))

	send(t, ws, `{"type":"silence"}`)
	assert.Contains(t, readRaw(t, ws), "accepted only in demo mode")
}

func TestAuthorizeAndOnMessage(t *testing.T) {
	cfg := testConfig()
	cfg.Authorize = func(uid, channel string) bool { return channel != "secret" || uid == "admin" }
	var mu sync.Mutex
	var got []string
	cfg.OnMessage = func(ctx context.Context, uid, typ string, frame json.RawMessage) error {
		mu.Lock()
		got = append(got, uid+" "+typ+" "+string(frame))
		mu.Unlock()
		if typ == "vote" {
			return errors.New("voting is closed")
		}
		return nil
	}
	s := startServer(t, cfg)
	ws, _ := s.dial(t, "bob")
	send(t, ws, `{"type":"join","channel":"secret"}`)
	assert.Equal(t, `{"type":"error","error":"not allowed to join this channel","channel":"secret"}`, readRaw(t, ws))
	_, snaps := s.dialIn(t, "admin", "secret")
	assert.Equal(t, []string{`{"type":"joined","channel":"secret","count":1,"members":["admin"]}`}, snaps)

	send(t, ws, `{"type":"cursor","channel":"lobby","n":[1]}`)
	send(t, ws, `{"type":"vote","text":5}`)
	assert.Equal(t, `{"type":"error","error":"voting is closed"}`, readRaw(t, ws))
	mu.Lock()
	assert.Equal(t, []string{`bob cursor {"type":"cursor","channel":"lobby","n":[1]}`, `bob vote {"type":"vote","text":5}`}, got)
	mu.Unlock()

	plain := startServer(t, testConfig())
	ws, _ = plain.dial(t, "bob")
	send(t, ws, `{"type":"cursor"}`)
	assert.Equal(t, `{"type":"error","error":"unknown type \"cursor\""}`, readRaw(t, ws))
}

func TestGoServerAPI(t *testing.T) {
	var mu sync.Mutex
	var edges []string
	cfg := testConfig()
	cfg.OnPresence = func(uid string, online bool) {
		mu.Lock()
		edges = append(edges, uid+map[bool]string{true: " online", false: " offline"}[online])
		mu.Unlock()
	}
	s := startServer(t, cfg)
	ctx := context.Background()
	bob1, _ := s.dialIn(t, "bob", "lobby")
	bob2, _ := s.dial(t, "bob")
	alice, _ := s.dialIn(t, "alice", "lobby")
	carol, _ := s.dial(t, "carol")

	n, err := s.hub.Online(ctx, "bob")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	count, members, err := s.hub.Members(ctx, "lobby", 1)
	require.NoError(t, err)
	assert.Equal(t, 2, count)
	assert.Equal(t, []string{"alice"}, members)

	require.NoError(t, s.hub.Publish(ctx, "lobby", json.RawMessage(`{"news":1}`)))
	for _, ws := range []*websocket.Conn{bob1, alice} {
		assert.Equal(t, `{"type":"publish","channel":"lobby","data":{"news":1}}`, readRaw(t, ws))
	}
	require.NoError(t, s.hub.Send(ctx, "bob", json.RawMessage(`"psst"`)))
	for _, ws := range []*websocket.Conn{bob1, bob2} {
		assert.Equal(t, `{"type":"message","data":"psst"}`, readRaw(t, ws))
	}
	assert.Error(t, s.hub.Publish(ctx, "a b", json.RawMessage(`1`)))
	assert.Error(t, s.hub.Send(ctx, "bob", json.RawMessage(`{`)))

	require.NoError(t, s.hub.Disconnect(ctx, "bob"))
	for _, ws := range []*websocket.Conn{bob1, bob2} {
		ce := readClose(t, ws)
		assert.Equal(t, protocol.CloseDisconnected, ce.Code)
		assert.Equal(t, "disconnected", ce.Text)
	}
	require.Eventually(t, func() bool { return !s.online(t, "bob") }, waitLong, time.Millisecond)
	send(t, carol, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, readRaw(t, carol), "carol got nothing, and stays")
	send(t, alice, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, readRaw(t, alice), "alice got no message, and stays")

	require.NoError(t, s.hub.Shutdown(ctx)) // waits for OnPresence calls
	mu.Lock()
	defer mu.Unlock()
	want := []string{"bob online", "alice online", "carol online", "bob offline"}
	require.GreaterOrEqual(t, len(edges), len(want))
	assert.Equal(t, want, edges[:len(want)], "each edge once, in order")
	assert.ElementsMatch(t, []string{"alice offline", "carol offline"}, edges[len(want):], "at shutdown")
}

func TestHTTPServerAPI(t *testing.T) {
	cfg := testConfig()
	cfg.APIKey = "k3y"
	s := startServer(t, cfg)
	bob, _ := s.dialIn(t, "bob", "lobby")
	key := "apikey k3y"
	for _, tc := range []struct {
		name, method, path string
		body               any
		auth               string
		code               int
		err                string
	}{
		{"publish", "POST", "/api/publish", `{"channel":"lobby","data":{"n":1}}`, key, 204, ""},
		{"send", "POST", "/api/send", `{"uid":"bob","data":[1,2]}`, key, 204, ""},
		{"no key", "POST", "/api/publish", `{"channel":"lobby","data":1}`, "", 401, "apikey"},
		{"wrong key", "GET", "/api/presence", nil, "apikey nope", 401, "apikey"},
		{"bearer is not a key", "GET", "/api/presence/bob", nil, "Bearer k3y", 401, "apikey"},
		{"presence with key", "GET", "/api/presence", nil, key, 200, ""},
		{"channel with key", "GET", "/api/channels/lobby", nil, key, 200, ""},
		{"bad channel", "POST", "/api/publish", `{"channel":"a b","data":1}`, key, 400, "invalid channel"},
		{"no data", "POST", "/api/publish", `{"channel":"lobby"}`, key, 400, `missing "data"`},
		{"not JSON", "POST", "/api/send", `{"uid":`, key, 400, "JSON"},
		{"bad uid", "POST", "/api/send", `{"uid":"a b","data":1}`, key, 400, "user ID"},
		{"unknown path", "GET", "/api/nothing", nil, key, 404, "not found"},
		{"wrong method", "DELETE", "/api/publish", nil, key, 405, "method not allowed"},
		{"heartbeat needs no key", "POST", "/api/heartbeat?uid=hb", nil, "", 204, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := s.do(t, tc.method, tc.path, tc.body, tc.auth)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, msg, tc.err)
		})
	}
	assert.Equal(t, `{"type":"publish","channel":"lobby","data":{"n":1}}`, readRaw(t, bob))
	assert.Equal(t, `{"type":"message","data":[1,2]}`, readRaw(t, bob))

	// With user tokens and no key the server API is off; in demo mode, open.
	jwtMode := startServer(t, jwtConfig())
	code, msg := jwtMode.do(t, "GET", "/api/presence", nil, "")
	assert.Equal(t, http.StatusForbidden, code)
	assert.Contains(t, msg, "API key")
	code, _ = jwtMode.do(t, "POST", "/api/send", `{"uid":"bob","data":1}`, "")
	assert.Equal(t, http.StatusForbidden, code)
	demo := startServer(t, testConfig())
	code, _ = demo.do(t, "POST", "/api/publish", `{"channel":"lobby","data":1}`, "")
	assert.Equal(t, http.StatusNoContent, code)
}

func TestTwoHubsShareARegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, node := range []string{"a", "b"} {
		cfg := testConfig()
		cfg.Registerer = reg
		cfg.MetricsLabels = prometheus.Labels{"hub": node}
		hub, err := transport.NewManual(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = hub.Shutdown(context.Background()) })
	}
	cfg := testConfig()
	cfg.Registerer = reg
	cfg.MetricsNamespace = "chat"
	hub, err := transport.NewManual(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hub.Shutdown(context.Background()) })
	families, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	assert.Contains(t, names, "presenced_connections")
	assert.Contains(t, names, "chat_connections")
	i := slices.Index(names, "presenced_connections")
	assert.Len(t, families[i].GetMetric(), 2, "one series per hub")
}

func (s *testServer) online(t *testing.T, uid string) bool {
	t.Helper()
	n, err := s.hub.Online(context.Background(), url.PathEscape(uid))
	require.NoError(t, err)
	return n > 0
}

// A user's presence says its state and, once it is offline, when it was
// last seen: after its connection closed and after one timed out.
func TestUserPresenceHasStateAndLastSeen(t *testing.T) {
	s := startServer(t, testConfig())
	type presence struct {
		UID         string `json:"uid"`
		Online      bool   `json:"online"`
		Connections int    `json:"connections"`
		State       string `json:"state"`
		LastSeen    int64  `json:"last_seen"`
	}
	user := func(uid string) presence {
		var p presence
		require.Equal(t, http.StatusOK, s.getJSON(t, "/api/presence/"+uid, &p))
		return p
	}
	assert.Equal(t, presence{UID: "bob", State: "offline"}, user("bob"), "never seen")

	bob, _ := s.dial(t, "bob")
	assert.Equal(t, presence{UID: "bob", Online: true, Connections: 1, State: "active"}, user("bob"))
	before := time.Now().UnixMilli()
	require.NoError(t, bob.Close())
	require.Eventually(t, func() bool { return !user("bob").Online }, waitLong, 10*time.Millisecond)
	p := user("bob")
	assert.Equal(t, "offline", p.State)
	assert.True(t, p.LastSeen >= before && p.LastSeen <= time.Now().UnixMilli(), "last seen %d, closed after %d", p.LastSeen, before)

	carol, _ := s.dial(t, "carol")
	before = time.Now().UnixMilli()
	s.step(31) // silent for the timeout; the test does not read, so no pong
	assert.Equal(t, protocol.CloseIdleTimeout, readClose(t, carol).Code)
	require.Eventually(t, func() bool { return !user("carol").Online }, waitLong, 10*time.Millisecond)
	p = user("carol")
	assert.Equal(t, "offline", p.State)
	assert.GreaterOrEqual(t, p.LastSeen, before, "timed out")
}

// A watcher's status frame says when each user in offline was last seen.
func TestStatusFramesSayWhenLastSeen(t *testing.T) {
	s := startServer(t, testConfig())
	w, _ := s.dial(t, "w")
	send(t, w, `{"type":"watch","uids":["bob"]}`)
	readUntil(t, w, `{"type":"watching","online":[]}`)
	bob, _ := s.dial(t, "bob")
	s.step(1)
	readUntil(t, w, `{"type":"status","online":["bob"],"offline":[]}`)
	before := time.Now().UnixMilli()
	require.NoError(t, bob.Close())
	require.Eventually(t, func() bool {
		var p struct{ Online bool }
		s.getJSON(t, "/api/presence/bob", &p)
		return !p.Online
	}, waitLong, 10*time.Millisecond)
	after := time.Now().UnixMilli()
	s.step(1)
	var st struct {
		Type     string           `json:"type"`
		Offline  []string         `json:"offline"`
		LastSeen map[string]int64 `json:"last_seen"`
	}
	require.NoError(t, json.Unmarshal([]byte(readRaw(t, w)), &st))
	assert.Equal(t, "status", st.Type)
	assert.Equal(t, []string{"bob"}, st.Offline)
	require.Contains(t, st.LastSeen, "bob")
	assert.True(t, st.LastSeen["bob"] >= before && st.LastSeen["bob"] <= after, "last seen %d within [%d, %d]", st.LastSeen["bob"], before, after)
	var p struct {
		LastSeen int64 `json:"last_seen"`
	}
	s.getJSON(t, "/api/presence/bob", &p)
	assert.Equal(t, p.LastSeen, st.LastSeen["bob"], "the status frame and the HTTP API say the same time: the offline edge's")
}
