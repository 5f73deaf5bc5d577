package transport_test

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A WebSocket ping's pong comes after the answers to the frames sent before
// the ping, so a client that waits for the pong has those answers too.
func TestPongComesAfterEarlierAnswers(t *testing.T) {
	for _, park := range []bool{false, true} {
		cfg := testConfig()
		cfg.ParkReaders = park
		s := startServer(t, cfg)
		ws := s.dialRaw(t, "uid=pat", nil)
		readRaw(t, ws) // welcome
		var got []string
		ws.SetPongHandler(func(data string) error { got = append(got, "control pong "+data); return nil })
		send(t, ws, `{"type":"ping"}`)
		send(t, ws, `{"type":"join","channel":"lobby"}`)
		send(t, ws, `{"type":"chat","channel":"nowhere","text":"hi"}`)
		require.NoError(t, ws.WriteControl(websocket.PingMessage, []byte("p1"), time.Now().Add(waitLong)))
		send(t, ws, `{"type":"ping"}`)
		require.NoError(t, ws.SetReadDeadline(time.Now().Add(waitLong)))
		for len(got) < 5 {
			_, data, err := ws.ReadMessage() // runs the pong handler, in order
			require.NoError(t, err, "so far: %q", got)
			got = append(got, string(data))
		}
		assert.Equal(t, []string{
			`{"type":"pong"}`,
			`{"type":"joined","channel":"lobby","count":1,"members":["pat"]}`,
			`{"type":"error","error":"not a member of the channel: join it first","channel":"nowhere"}`,
			"control pong p1",
			`{"type":"pong"}`,
		}, got, "parked readers: %v", park)
	}
}
