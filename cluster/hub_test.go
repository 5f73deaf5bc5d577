package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/apicheck"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

// startHub serves a transport Hub on a cluster engine over loopback.
func startHub(t *testing.T, srv *redisServer, name string) (*httptest.Server, *Engine) {
	hs, e, _ := startHubWith(t, srv, name, nil)
	return hs, e
}

// startHubWith is startHub with an OnPresence hook.
func startHubWith(t *testing.T, srv *redisServer, name string, onPresence func(uid string, online bool)) (*httptest.Server, *Engine, *transport.Hub) {
	t.Helper()
	return startHubConfig(t, testConfig(srv.client(t), name),
		transport.Config{Slots: 31, Tick: 100 * time.Millisecond, OnPresence: onPresence}, nil)
}

// startHubConfig serves a transport Hub, made from tc, on a cluster engine
// made from cfg, over loopback; wrap, if set, wraps the engine the Hub is
// given.
func startHubConfig(t *testing.T, cfg Config, tc transport.Config, wrap func(*Engine) presence.Engine) (*httptest.Server, *Engine, *transport.Hub) {
	t.Helper()
	e, err := New(cfg)
	require.NoError(t, err)
	tc.Engine = e
	if wrap != nil {
		tc.Engine = wrap(e)
	}
	h, err := transport.New(tc)
	require.NoError(t, err)
	hs := httptest.NewServer(apicheck.Handler(t, h)) // against docs/openapi.yaml
	select {                                         // the reader has its view: edges from now on reach it
	case <-e.health.reading:
	case <-time.After(10 * time.Second):
		t.Fatal("the engine did not start reading")
	}
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		_ = e.Close(ctx)
	})
	return hs, e, h
}

type frame struct {
	Type    string          `json:"type"`
	UID     string          `json:"uid"`
	Online  json.RawMessage `json:"online"`
	Offline json.RawMessage `json:"offline"`
	From    string          `json:"from"`
	Text    string          `json:"text"`
}

func dial(t *testing.T, hs *httptest.Server, uid string) *websocket.Conn {
	t.Helper()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws?channels=lobby&uid=" + uid
	ws, resp, err := websocket.DefaultDialer.Dial(url, nil)
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { ws.Close() })
	return ws
}

// next reads frames until one matches, failing after a deadline.
func next(t *testing.T, ws *websocket.Conn, what string, match func(frame) bool) frame {
	t.Helper()
	return nextAs(t, ws, what, match)
}

// nextAs is next for frames read into F.
func nextAs[F any](t *testing.T, ws *websocket.Conn, what string, match func(F) bool) F {
	t.Helper()
	require.NoError(t, ws.SetReadDeadline(time.Now().Add(testWait)))
	for {
		_, data, err := ws.ReadMessage()
		require.NoError(t, err, "waiting for %s", what)
		var f F
		require.NoError(t, json.Unmarshal(data, &f), "frame %s", data)
		if match(f) {
			return f
		}
	}
}

// status matches a status frame saying uid went online or offline.
func status(uid string, online bool) func(frame) bool {
	return func(f frame) bool {
		list := f.Offline
		if online {
			list = f.Online
		}
		var uids []string
		return f.Type == "status" && json.Unmarshal(list, &uids) == nil && slices.Contains(uids, uid)
	}
}

// Two presenced hubs on one Redis: a client on either hears of a watched
// user on the other, chat in a channel crosses nodes, and the HTTP API
// answers cluster-wide.
func TestTwoHubsShareWebSocketPresence(t *testing.T) {
	srv := startRedis(t)
	hsA, _ := startHub(t, srv, "a")
	hsB, engB := startHub(t, srv, "b")

	bob := dial(t, hsB, "bob")
	next(t, bob, "bob's lobby", func(f frame) bool { return f.Type == "joined" })
	require.NoError(t, bob.WriteMessage(websocket.TextMessage, []byte(`{"type":"watch","uids":["alice"]}`)))
	next(t, bob, "bob's watch list", func(f frame) bool { return f.Type == "watching" })
	alice := dial(t, hsA, "alice")
	next(t, alice, "alice's lobby", func(f frame) bool { return f.Type == "joined" })
	next(t, bob, "alice online on b", status("alice", true))

	resp, err := http.Get(hsB.URL + "/api/presence/alice")
	require.NoError(t, err)
	var user struct {
		UID         string `json:"uid"`
		Online      bool   `json:"online"`
		Connections int    `json:"connections"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&user))
	resp.Body.Close()
	assert.Equal(t, "alice", user.UID)
	assert.True(t, user.Online)
	assert.Equal(t, 1, user.Connections)

	var all struct {
		Count int      `json:"count"`
		Users []string `json:"users"`
	}
	// Each node's write lands on its own time: bob's may trail alice's edge.
	require.Eventually(t, func() bool {
		resp, err := http.Get(hsA.URL + "/api/presence")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&all))
		return all.Count == 2
	}, testWait, 10*time.Millisecond, "both users listed")
	assert.Equal(t, []string{"alice", "bob"}, all.Users)

	require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte(`{"type":"chat","channel":"lobby","text":"hi"}`)))
	got := next(t, bob, "chat from alice", func(f frame) bool { return f.Type == "chat" })
	assert.Equal(t, "alice", got.From)
	assert.Equal(t, "hi", got.Text)

	resp, err = http.Get(hsA.URL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, alice.Close())
	next(t, bob, "alice offline on b", status("alice", false))
	n, err := connsOf(context.Background(), engB, "alice")
	require.NoError(t, err)
	assert.Equal(t, 0, n)
}

// OnPresence hears each edge once across the cluster: on the node whose
// connection made it, not on the others.
func TestOnPresenceOncePerEdgeAcrossNodes(t *testing.T) {
	srv := startRedis(t)
	var mu sync.Mutex
	heard := map[string][]string{}
	hook := func(node string) func(string, bool) {
		return func(uid string, online bool) {
			mu.Lock()
			heard[node] = append(heard[node], fmt.Sprintf("%s %v", uid, online))
			mu.Unlock()
		}
	}
	hsA, _, _ := startHubWith(t, srv, "a", hook("a"))
	hsB, _, _ := startHubWith(t, srv, "b", hook("b"))
	bob := dial(t, hsB, "bob")
	next(t, bob, "bob's lobby", func(f frame) bool { return f.Type == "joined" })
	require.NoError(t, bob.WriteMessage(websocket.TextMessage, []byte(`{"type":"watch","uids":["alice"]}`)))
	next(t, bob, "bob's watch list", func(f frame) bool { return f.Type == "watching" })
	alice := dial(t, hsA, "alice")
	next(t, bob, "alice online on b", status("alice", true))
	require.NoError(t, alice.Close())
	next(t, bob, "alice offline on b", status("alice", false))
	// A node hears its edge when it handles its script's reply, which may
	// trail the edge's delivery to the other node.
	eventually(t, "each edge heard on the node that made it", func(c *assert.CollectT) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(c, []string{"alice true", "alice false"}, heard["a"])
		assert.Equal(c, []string{"bob true"}, heard["b"], "b heard only its own bob")
	})
}

// chFrame is a channel frame: joined, presence, publish or message.
type chFrame struct {
	Type    string          `json:"type"`
	Channel string          `json:"channel"`
	Count   int             `json:"count"`
	Members []string        `json:"members"`
	Joins   []string        `json:"joins"`
	Leaves  []string        `json:"leaves"`
	Data    json.RawMessage `json:"data"`
}

func nextCh(t *testing.T, ws *websocket.Conn, what string, match func(chFrame) bool) chFrame {
	t.Helper()
	return nextAs(t, ws, what, match)
}

// Protocol v2 across nodes: snapshots count the members of every node, diffs
// from other nodes arrive, chat, Publish, Send and Disconnect reach clients
// on the other node, and /api/channels answers cluster-wide.
func TestChannelsAcrossNodes(t *testing.T) {
	srv := startRedis(t)
	hsA, _, hubA := startHubWith(t, srv, "a", nil)
	hsB, _, hubB := startHubWith(t, srv, "b", nil)
	hubs := []*transport.Hub{hubA, hubB}
	ctx := context.Background()

	bob := dial(t, hsB, "bob")
	got := nextCh(t, bob, "bob's lobby", func(f chFrame) bool { return f.Type == "joined" })
	assert.Equal(t, 1, got.Count)
	assert.Equal(t, []string{"bob"}, got.Members)
	// b shows bob to its own clients at once and writes him to Redis a
	// moment later: a's snapshot counts him once that write has landed.
	eventually(t, "bob's membership written", func(c *assert.CollectT) {
		count, _, err := hubs[0].Members(ctx, "lobby", 0)
		assert.NoError(c, err)
		assert.Equal(c, 1, count)
	})

	alice := dial(t, hsA, "alice")
	got = nextCh(t, alice, "alice's lobby", func(f chFrame) bool { return f.Type == "joined" })
	assert.Equal(t, 2, got.Count, "the snapshot counts both nodes")
	assert.Equal(t, []string{"alice", "bob"}, got.Members)
	got = nextCh(t, bob, "alice joins, on b", func(f chFrame) bool { return f.Type == "presence" })
	assert.Equal(t, []string{"alice"}, got.Joins)
	assert.Empty(t, got.Leaves)
	assert.Equal(t, 2, got.Count)

	resp, err := http.Get(hsA.URL + "/api/channels/lobby")
	require.NoError(t, err)
	var listing struct {
		Channel string   `json:"channel"`
		Count   int      `json:"count"`
		Members []string `json:"members"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&listing))
	resp.Body.Close()
	assert.Equal(t, 2, listing.Count)
	assert.Equal(t, []string{"alice", "bob"}, listing.Members)
	count, members, err := hubs[1].Members(ctx, "lobby", 1)
	require.NoError(t, err)
	assert.Equal(t, 2, count)
	assert.Equal(t, []string{"alice"}, members)

	// A channel only one node's client joined: the other node's Members
	// counts it once b's write has landed (writes are batched, not awaited).
	require.NoError(t, bob.WriteMessage(websocket.TextMessage, []byte(`{"type":"join","channel":"side"}`)))
	nextCh(t, bob, "bob in side", func(f chFrame) bool { return f.Type == "joined" && f.Channel == "side" })
	require.Eventually(t, func() bool {
		count, _, err := hubs[0].Members(ctx, "side", 10)
		return err == nil && count == 1
	}, testWait, 10*time.Millisecond, "a counts bob in side")

	require.NoError(t, hubs[0].Publish(ctx, "lobby", json.RawMessage(`{"n":1}`)))
	got = nextCh(t, bob, "publish on b", func(f chFrame) bool { return f.Type == "publish" })
	assert.JSONEq(t, `{"n":1}`, string(got.Data))
	require.NoError(t, hubs[0].Send(ctx, "bob", json.RawMessage(`{"n":2}`)))
	got = nextCh(t, bob, "message on b", func(f chFrame) bool { return f.Type == "message" })
	assert.JSONEq(t, `{"n":2}`, string(got.Data))
	conns, err := hubs[0].Online(ctx, "bob")
	require.NoError(t, err)
	assert.Equal(t, 1, conns)

	require.NoError(t, hubs[0].Disconnect(ctx, "bob"))
	require.NoError(t, bob.SetReadDeadline(time.Now().Add(testWait)))
	for {
		_, _, err := bob.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, 4403, ce.Code)
			break
		}
	}
	got = nextCh(t, alice, "bob leaves, on a", func(f chFrame) bool { return f.Type == "presence" })
	assert.Equal(t, []string{"bob"}, got.Leaves)
	assert.Equal(t, 1, got.Count)
}

// A user who closes and at once reconnects to another node, again and again,
// is never told by its new connection that it is offline, nor left out of
// its channel.
func TestReconnectAcrossNodesNeverSeesItselfOffline(t *testing.T) {
	srv := startRedis(t)
	hsA, _, _ := startHubWith(t, srv, "a", nil)
	hsB, _, _ := startHubWith(t, srv, "b", nil)
	hubs := []*httptest.Server{hsA, hsB}
	type anyFrame struct {
		chFrame
		Online  []string `json:"online"`
		Offline []string `json:"offline"`
	}
	var prev *websocket.Conn
	for round := range 20 {
		if prev != nil {
			require.NoError(t, prev.Close()) // and at once a new one, on the other node
		}
		ws := dial(t, hubs[round%2], "alice")
		got := nextAs(t, ws, "joined", func(f anyFrame) bool { return f.Type == "joined" })
		assert.Contains(t, got.Members, "alice", "round %d: the snapshot lists alice", round)
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"watch","uids":["alice"]}`)))
		got = nextAs(t, ws, "watching", func(f anyFrame) bool { return f.Type == "watching" })
		assert.Equal(t, []string{"alice"}, got.Online, "round %d: watching", round)
		prev = ws
		// Several ticks of the new connection's frames: nothing says alice left.
		require.NoError(t, ws.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				break
			}
			var f anyFrame
			require.NoError(t, json.Unmarshal(data, &f))
			assert.NotContains(t, f.Offline, "alice", "round %d: %s", round, data)
			assert.NotContains(t, f.Leaves, "alice", "round %d: %s", round, data)
		}
	}
}

// While Redis is away a node is live but not ready, and keeps serving its
// own clients; when Redis is back it is ready again.
func TestReadinessFollowsRedis(t *testing.T) {
	srv := startRedis(t)
	hs, _ := startHub(t, srv, "a")
	get := func(path string) int {
		resp, err := http.Get(hs.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get("/readyz"))
	alice := dial(t, hs, "alice")
	next(t, alice, "alice's lobby", func(f frame) bool { return f.Type == "joined" })

	srv.kill()
	require.Eventually(t, func() bool { return get("/readyz") == http.StatusServiceUnavailable }, testWait, 20*time.Millisecond)
	assert.Equal(t, http.StatusOK, get("/healthz"))
	require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)))
	next(t, alice, "a pong while Redis is away", func(f frame) bool { return f.Type == "pong" })

	srv.start()
	require.Eventually(t, func() bool { return get("/readyz") == http.StatusOK }, testWait, 20*time.Millisecond)
}

// A watcher on one node hears when a user on another was last seen: the
// offline edge's time on the Redis clock, the same that GET reads.
func TestLastSeenInStatusIsTheEdgeTime(t *testing.T) {
	srv := startRedis(t)
	a, _ := startHub(t, srv, "a")
	b, _ := startHub(t, srv, "b")
	w := dial(t, b, "w")
	require.NoError(t, w.WriteJSON(map[string]any{"type": "watch", "uids": []string{"bob"}}))
	next(t, w, "watching", func(f frame) bool { return f.Type == "watching" })
	bob := dial(t, a, "bob")
	next(t, w, "bob online", status("bob", true))
	require.NoError(t, bob.Close())
	type lastSeen struct {
		Type     string           `json:"type"`
		Offline  []string         `json:"offline"`
		LastSeen map[string]int64 `json:"last_seen"`
	}
	st := nextAs(t, w, "bob offline", func(f lastSeen) bool { return f.Type == "status" && slices.Contains(f.Offline, "bob") })
	resp, err := http.Get(b.URL + "/api/presence/bob")
	require.NoError(t, err)
	defer resp.Body.Close()
	var p struct {
		Online   bool  `json:"online"`
		LastSeen int64 `json:"last_seen"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	assert.False(t, p.Online)
	assert.NotZero(t, p.LastSeen)
	assert.Equal(t, p.LastSeen, st.LastSeen["bob"])
}

// Tabs that connect and close at once, over real WebSockets on a cluster
// Hub, each yield their four edges in order, as the webhooks report them,
// and leave nobody behind in the channel or online.
func TestTabsThatComeAndGoYieldEveryEdge(t *testing.T) {
	srv := startRedis(t)
	var (
		mu    sync.Mutex
		edges = map[string][]string{}
	)
	onEdges := func(es []presence.Edge) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range es {
			edges[e.UID] = append(edges[e.UID], strings.TrimSpace(e.Kind.String()+" "+e.Channel))
		}
	}
	hs, _, _ := startHubConfig(t, testConfig(srv.client(t), "a"),
		transport.Config{Slots: 31, Tick: 100 * time.Millisecond, OnEdges: onEdges}, nil)
	w := dial(t, hs, "watcher")
	next(t, w, "welcome", func(f frame) bool { return f.Type == "welcome" })
	uids := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"}
	for _, uid := range uids { // closed as soon as it is open: within one write round of the engine
		require.NoError(t, dial(t, hs, uid).Close())
	}
	want := []string{"online", "join lobby", "leave lobby", "offline"}
	eventually(t, "every tab's four edges", func(c *assert.CollectT) {
		mu.Lock()
		defer mu.Unlock()
		for _, uid := range uids {
			assert.Equal(c, want, edges[uid], uid)
		}
	})
	resp, err := http.Get(hs.URL + "/api/channels/lobby")
	require.NoError(t, err)
	defer resp.Body.Close()
	var ch struct{ Members []string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ch))
	assert.Equal(t, []string{"watcher"}, ch.Members)
}
