package transport_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
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

// RFC 6455 5.5.1: once the server has sent its close frame it sends no
// more data frames. A ping followed, in the same write, by a frame that
// ends the connection (the client's close frame, or one the server must
// refuse) has its pong go out before the server's close frame, or not at
// all: never after it, on either reader.
func TestNoPongAfterTheCloseFrame(t *testing.T) {
	closeFrame := clientFrame(fin|opClose, append(binary.BigEndian.AppendUint16(nil, 1000), "bye"...))
	cases := []struct {
		name  string
		after []byte
		code  int
	}{
		{"a close frame", closeFrame, websocket.CloseNormalClosure},
		{"a frame with an RSV bit", clientFrame(fin|0x40|opText, appPing), websocket.CloseProtocolError},
		{"a reserved opcode", clientFrame(fin|0x3, appPing), websocket.CloseProtocolError},
		{"an unmasked frame", clientFrame(fin|opText|unmaskedFlag, appPing), websocket.CloseProtocolError},
		{"a ping control frame of 126 bytes", clientFrame(fin|opPing, make([]byte, 126)), websocket.CloseProtocolError},
		{"a fragmented control frame", clientFrame(opPing, []byte("p")), websocket.CloseProtocolError},
		{"a text frame over MaxMessage", clientFrame(fin|opText, []byte(strings.Repeat("x", 2000))), websocket.CloseMessageTooBig},
	}
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ParkReaders = mode.park
			cfg.MaxMessage = 1000 // the frame over it fits in one read
			s := startServer(t, cfg)
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					c, br := welcomed(t, s, fmt.Sprintf("%s-%d", mode.name, i))
					// A ping first, so the writer is done with the welcome
					// and the polled reader writes its pongs itself.
					write(t, c, clientFrame(fin|opText, appPing))
					require.Equal(t, `{"type":"pong"}`, string(serverFrameOf(t, c, br, opText)))
					write(t, c, append(clientFrame(fin|opText, appPing), tc.after...))
					for {
						op, payload := serverFrame(t, c, br)
						if op == opClose {
							assert.Equal(t, tc.code, closeCode(t, payload))
							break
						}
						require.Equal(t, opText, op)
						require.Equal(t, `{"type":"pong"}`, string(payload), "before the close frame, only the pong")
					}
					// The server drains after a 1009 until the client hangs up;
					// after another close it may have reset the connection.
					_ = c.(*net.TCPConn).CloseWrite()
					require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLong)))
					rest, err := io.ReadAll(br)
					if !errors.Is(err, syscall.ECONNRESET) {
						require.NoError(t, err, "the server closes the connection")
					}
					assert.Empty(t, rest, "bytes after the server's close frame: %q", rest)
				})
			}
		})
	}
}
