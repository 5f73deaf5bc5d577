package transport

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// framerWait bounds every wait of these tests: generous, for a busy machine.
const framerWait = 20 * time.Second

// onlyConn returns h's one connection.
func onlyConn(t *testing.T, h *Hub) *conn {
	t.Helper()
	var live []*conn
	if h.poller != nil {
		live = h.poller.appendConns(live)
	}
	h.mu.Lock()
	for c := range h.live {
		live = append(live, c)
	}
	h.mu.Unlock()
	require.Len(t, live, 1)
	return live[0]
}

func holdsFramer(c *conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fr != nil
}

// A polled connection holds gorilla's Conn only while it reads or writes
// through it: idle after its welcome, and again after frames both ways. A
// framer made afresh (the spares dropped) reads, answers pings and closes as
// the handshake's does, and is kept spare after. A parked reader keeps its
// framer.
func TestFramersAreLentWhileUsed(t *testing.T) {
	for _, park := range []bool{false, true} {
		t.Run(map[bool]string{false: "polled", true: "parked"}[park], func(t *testing.T) {
			h, err := newHub(Config{ParkReaders: park}, true)
			require.NoError(t, err)
			srv := httptest.NewServer(h)
			defer srv.Close()
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), framerWait)
				defer cancel()
				assert.NoError(t, h.Shutdown(ctx))
			}()

			ws, resp, err := websocket.DefaultDialer.Dial("ws://"+srv.Listener.Addr().String()+"/ws?uid=alice", nil)
			require.NoError(t, err)
			resp.Body.Close()
			defer ws.Close()
			require.NoError(t, ws.SetReadDeadline(time.Now().Add(framerWait)))
			_, welcome, err := ws.ReadMessage()
			require.NoError(t, err)
			require.Contains(t, string(welcome), `"type":"welcome"`)
			c := onlyConn(t, h)
			polled := c.w.polled
			if polled {
				require.Eventually(t, func() bool { return !holdsFramer(c) }, framerWait, time.Millisecond,
					"an idle polled connection holds no framer")
			} else {
				assert.True(t, holdsFramer(c))
			}

			h.dropSpareFramers() // so a polled connection's next framer is made
			pongs := make(chan string, 1)
			ws.SetPongHandler(func(data string) error { pongs <- data; return nil })
			require.NoError(t, ws.WriteControl(websocket.PingMessage, []byte("p1"), time.Now().Add(framerWait)))
			require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"join","channel":"room"}`)))
			_, joined, err := ws.ReadMessage()
			require.NoError(t, err)
			assert.JSONEq(t, `{"type":"joined","channel":"room","count":1,"members":["alice"]}`, string(joined))
			select {
			case p := <-pongs:
				assert.Equal(t, "p1", p, "the pong comes before the answer to the frame after the ping")
			default:
				t.Fatal("no pong before the joined frame")
			}
			if polled {
				require.Eventually(t, func() bool { return !holdsFramer(c) }, framerWait, time.Millisecond,
					"a polled connection gives its framer back once its frames are read and written")
				assert.Len(t, h.framers, 1, "the framer made is spare")
			} else {
				assert.True(t, holdsFramer(c))
			}

			require.NoError(t, ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(framerWait)))
			_, _, err = ws.ReadMessage()
			var ce *websocket.CloseError
			require.ErrorAs(t, err, &ce, "the close frame is answered")
			assert.Equal(t, websocket.CloseNormalClosure, ce.Code)
		})
	}
}
