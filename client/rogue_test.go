package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// rogue is a server written to misbehave: every WebSocket it accepts runs
// the test's script, which decides what the server says.
type rogue struct {
	url      string
	upgrades atomic.Int64
}

// startRogue serves script on every connection; n counts them from 1.
func startRogue(t *testing.T, script func(n int64, ws *websocket.Conn)) *rogue {
	t.Helper()
	r := &rogue{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, req, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		script(r.upgrades.Add(1), ws)
	}))
	t.Cleanup(srv.Close)
	r.url = "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
	return r
}

// dialRogue dials r and closes the Client at the end of the test.
func dialRogue(t *testing.T, r *rogue, opts client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	c, err := client.Dial(ctx, r.url, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

func send(ws *websocket.Conn, f protocol.Frame) error {
	return ws.WriteMessage(websocket.TextMessage, protocol.MustEncode(f).Data)
}

func sendWelcome(ws *websocket.Conn) error {
	return send(ws, protocol.Welcome{UID: "alice", TimeoutMS: 10_000})
}

// recv reads the Client's next frame, skipping its app pings.
func recv(ws *websocket.Conn) (protocol.Frame, error) {
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return nil, err
		}
		f, err := protocol.ParseClient(data)
		if err != nil {
			return nil, err
		}
		if f != (protocol.Ping{}) {
			return f, nil
		}
	}
}

// hold reads until the Client goes, and returns why it went.
func hold(ws *websocket.Conn) error {
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			return err
		}
	}
}

// marker is a publish a script sends after the frames under test: once
// the Client passed it on, it handled every frame before it.
func marker(ws *websocket.Conn) error {
	return send(ws, protocol.Publish{Channel: "lobby", Data: json.RawMessage(`"marker"`)})
}

// untilMarker reads c's events up to the marker, and returns those before.
func untilMarker(t *testing.T, c *client.Client) []protocol.Frame {
	t.Helper()
	var out []protocol.Frame
	for {
		ev := next(t, c)
		if p, ok := ev.(*protocol.Publish); ok && string(p.Data) == `"marker"` {
			return out
		}
		out = append(out, ev)
	}
}
