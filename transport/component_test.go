package transport_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

// An embedder mounts only what it wants: the socket at a path of its own,
// the API and the health checks as handlers of their own, in its mux.
func TestHubPiecesMountAlone(t *testing.T) {
	hub, err := transport.NewManual(testConfig())
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /chat/socket", hub.ServeWS)
	mux.Handle("/api/", hub.APIHandler())
	mux.Handle("/healthz", hub.HealthHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		assert.NoError(t, hub.Shutdown(ctx))
		srv.Close()
	})

	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/chat/socket?uid=alice", nil)
	require.NoError(t, err)
	defer ws.Close()
	assert.Equal(t, "welcome", readFrame(t, ws)["type"])

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, body := get("/api/presence/alice")
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"uid":"alice","online":true,"connections":1,"state":"active"}`, body)
	status, body = get("/healthz")
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"status":"ok","protocol":"`+protocol.Version+`"}`, body)
	status, body = get("/api/nope")
	assert.Equal(t, http.StatusNotFound, status, "the API handler refuses what it does not serve, in JSON")
	assert.JSONEq(t, `{"error":"not found"}`, body)
	status, _ = get("/ws?uid=bob")
	assert.Equal(t, http.StatusNotFound, status, "the socket is only where the embedder put it")

	rec := httptest.NewRecorder()
	hub.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/api/presence", nil))
	assert.Equal(t, http.StatusNotFound, rec.Code, "the health handler serves the health checks only")
}

// A Hub may serve a Node the embedder made, runs and uses beside it: a
// heartbeat through the Node is a user the Hub's clients see.
func TestHubServesTheEmbeddersNode(t *testing.T) {
	node, err := presence.New(presence.Config{Slots: 31, Tick: 100 * time.Millisecond, MaxChannels: 2})
	require.NoError(t, err)
	t.Cleanup(node.Close)
	s := startServer(t, transport.Config{Node: node, Slots: 5, MaxChannels: 50})
	assert.Equal(t, 3*time.Second, s.hub.Timeout(), "the Node's clock, not the Config's Slots")
	assert.Same(t, node, s.hub.Node())

	obs, _ := s.dialIn(t, "obs", "lobby")
	require.NoError(t, node.Heartbeat("hb", []string{"lobby"}))
	node.Step()
	readUntil(t, obs, `{"type":"presence","channel":"lobby","count":2,"joins":["hb"],"leaves":[]}`)

	send(t, obs, `{"type":"join","channel":"a"}`)
	readUntil(t, obs, `{"type":"joined","channel":"a","count":1,"members":["obs"]}`)
	send(t, obs, `{"type":"join","channel":"b"}`)
	readUntil(t, obs, `{"type":"error","error":"too many channels on one connection","channel":"b"}`)
}

// OnMessage gets a context that ends when its connection closes.
func TestOnMessageContextEndsWithTheConnection(t *testing.T) {
	got := make(chan context.Context, 1)
	cfg := testConfig()
	cfg.OnMessage = func(ctx context.Context, uid, typ string, frame json.RawMessage) error {
		got <- ctx
		return nil
	}
	s := startServer(t, cfg)
	ws, _ := s.dial(t, "alice")
	send(t, ws, `{"type":"cursor","channel":"lobby"}`)
	var ctx context.Context
	select {
	case ctx = <-got:
	case <-time.After(waitLong):
		t.Fatal("OnMessage not called")
	}
	require.NoError(t, ctx.Err(), "live while the connection is")
	ws.Close()
	select {
	case <-ctx.Done():
	case <-time.After(waitLong):
		t.Fatal("the context outlived its connection")
	}
}
