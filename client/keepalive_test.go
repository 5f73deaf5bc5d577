package client_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// TestKeepalives: against a server whose timeout is 300 ms, the Client
// sends app pings (several within a few timeouts, so at an interval under
// the timeout) and answers the server's WebSocket pings.
func TestKeepalives(t *testing.T) {
	var appPings, pongs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		ws.SetPongHandler(func(string) error { pongs.Add(1); return nil })
		welcome := protocol.MustEncode(protocol.Welcome{UID: "alice", TimeoutMS: 300}).Data
		if ws.WriteMessage(websocket.TextMessage, welcome) != nil {
			return
		}
		_ = ws.WriteControl(websocket.PingMessage, []byte("probe"), time.Now().Add(waitLong))
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if f, err := protocol.ParseClient(msg); err == nil && f == (protocol.Ping{}) {
				appPings.Add(1)
				if ws.WriteMessage(websocket.TextMessage, protocol.MustEncode(protocol.Pong{}).Data) != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	c, err := client.Dial(ctxLong(t), "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", client.Options{UID: "alice"})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	eventually(t, func() bool { return appPings.Load() >= 3 }, "app pings")
	eventually(t, func() bool { return pongs.Load() >= 1 }, "the server's ping answered")
	for len(c.Events()) > 0 {
		assert.NotEqual(t, "pong", (<-c.Events()).Type(), "pongs are not events")
	}
}
