package transport

import (
	"bufio"
	"context"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gorillaReader is the buffered reader gorilla reads through with ws.
// gorilla does not export it; this test reads it to hold gorilla to the
// rule the polled reader depends on, and fails if a new gorilla moves it.
func gorillaReader(t *testing.T, ws *websocket.Conn) *bufio.Reader {
	t.Helper()
	f := reflect.ValueOf(ws).Elem().FieldByName("br")
	require.True(t, f.IsValid(), "gorilla's Conn has no field br any more: check how it reads")
	require.Equal(t, reflect.TypeFor[*bufio.Reader](), f.Type())
	return (*bufio.Reader)(f.UnsafePointer())
}

// A connection's frames reach gorilla through the framer lent to it, which
// reads wire, into a read buffer of gorilla's own of readBufferSize bytes.
// With ReadBufferSize 0 gorilla would read through net/http's 4 KiB reader
// for the connection's life; reading anything but wire would bypass the
// poller's worker, which hands gorilla the frames it read off the socket.
func TestGorillaReadsThroughWire(t *testing.T) {
	for _, park := range []bool{false, true} {
		h, err := newHub(Config{ParkReaders: park}, true)
		require.NoError(t, err)
		assert.NotZero(t, h.upgrader.ReadBufferSize, "ReadBufferSize 0 has gorilla keep net/http's reader")
		assert.False(t, h.upgrader.EnableCompression, "wire refuses frames with RSV bits")
		srv := httptest.NewServer(h)
		ws, resp, err := websocket.DefaultDialer.Dial("ws://"+srv.Listener.Addr().String()+"/ws?uid=alice", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.NoError(t, ws.SetReadDeadline(time.Now().Add(20*time.Second)))
		_, _, err = ws.ReadMessage() // the welcome: the server has the connection
		require.NoError(t, err)

		c := onlyConn(t, h)
		assert.Equal(t, !park && h.poller != nil, c.w.polled)

		c.mu.Lock()
		lent := c.lendLocked()
		f := c.fr
		c.giveBackLocked()
		c.mu.Unlock()
		br := gorillaReader(t, lent)
		assert.Equal(t, readBufferSize, br.Size(), "gorilla's read buffer")
		rd := reflect.ValueOf(br).Elem().FieldByName("rd")
		require.True(t, rd.IsValid() && !rd.IsNil(), "bufio.Reader has no field rd any more")
		assert.Equal(t, unsafe.Pointer(f), rd.Elem().UnsafePointer(), "gorilla reads through the framer")
		if !c.w.polled {
			assert.Same(t, c, f.c, "a parked reader keeps its framer")
		}

		// And the frames read that way are answered.
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)))
		_, msg, err := ws.ReadMessage()
		require.NoError(t, err)
		assert.Equal(t, `{"type":"pong"}`, string(msg))

		ws.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		assert.NoError(t, h.Shutdown(ctx))
		cancel()
		srv.Close()
	}
}
