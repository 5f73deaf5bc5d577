package transport_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

// Frame bits and opcodes of RFC 6455, for frames written by hand.
const (
	fin          = 0x80
	opCont       = 0x0
	opText       = 0x1
	opClose      = 0x8
	opPing       = 0x9
	opPong       = 0xA
	unmaskedFlag = 0x100 // not a wire bit: clientFrame writes the frame unmasked
)

// clientFrame is a frame as a client sends it: masked, unless op carries
// unmaskedFlag.
func clientFrame(op int, payload []byte) []byte {
	return transport.ClientFrame(byte(op), payload, op&unmaskedFlag == 0)
}

// serverFrame reads one frame the server sent (unmasked, never fragmented).
func serverFrame(t *testing.T, c net.Conn, br *bufio.Reader) (op int, payload []byte) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLong)))
	var h [2]byte
	_, err := io.ReadFull(br, h[:])
	require.NoError(t, err, "reading a frame from the server")
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var x [2]byte
		_, err = io.ReadFull(br, x[:])
		n = uint64(binary.BigEndian.Uint16(x[:]))
	case 127:
		var x [8]byte
		_, err = io.ReadFull(br, x[:])
		n = binary.BigEndian.Uint64(x[:])
	}
	require.NoError(t, err)
	payload = make([]byte, n)
	_, err = io.ReadFull(br, payload)
	require.NoError(t, err)
	return int(h[0] & 0x0f), payload
}

// serverFrameOf reads until a frame with opcode op, skipping others.
func serverFrameOf(t *testing.T, c net.Conn, br *bufio.Reader, op int) []byte {
	t.Helper()
	for {
		got, payload := serverFrame(t, c, br)
		if got == op {
			return payload
		}
	}
}

func closeCode(t *testing.T, payload []byte) int {
	t.Helper()
	require.GreaterOrEqual(t, len(payload), 2, "close frame with a code")
	return int(binary.BigEndian.Uint16(payload))
}

func write(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	_, err := c.Write(b)
	require.NoError(t, err)
}

var appPing = []byte(`{"type":"ping"}`)

// TestEveryFrameInBothReadModes sends frames by hand, whole, split, pipelined
// and fragmented around control frames, to a polled Hub and to one that
// parks a reader per connection, and checks that both answer every frame,
// control frame and close code alike.
func TestEveryFrameInBothReadModes(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(t *testing.T, s *testServer, uid string, c net.Conn, br *bufio.Reader)
	}{
		{"a frame split byte by byte", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			for _, b := range clientFrame(fin|opText, appPing) {
				write(t, c, []byte{b})
				time.Sleep(2 * time.Millisecond)
			}
			assert.Equal(t, `{"type":"pong"}`, string(serverFrameOf(t, c, br, opText)))
		}},
		{"frames pipelined in one write", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			var all []byte
			for range 20 {
				all = append(all, clientFrame(fin|opText, appPing)...)
				all = append(all, clientFrame(fin|opPing, []byte("p"))...)
			}
			write(t, c, all)
			got := map[string]int{}
			for range 40 { // pongs and pong frames: the writer's and the reader's may interleave
				op, payload := serverFrame(t, c, br)
				got[fmt.Sprint(op, " ", string(payload))]++
			}
			assert.Equal(t, map[string]int{fmt.Sprint(opPong, " p"): 20, fmt.Sprint(opText, ` {"type":"pong"}`): 20}, got)
		}},
		{"a ping alone is answered", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(fin|opPing, []byte("hello")))
			assert.Equal(t, "hello", string(serverFrameOf(t, c, br, opPong)))
			write(t, c, clientFrame(fin|opPong, nil)) // a pong alone is read and dropped
			write(t, c, clientFrame(fin|opText, appPing))
			assert.Equal(t, `{"type":"pong"}`, string(serverFrameOf(t, c, br, opText)))
		}},
		{"a ping between fragments is answered before the message ends", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, append(clientFrame(opText, appPing[:7]), clientFrame(fin|opPing, []byte("mid"))...))
			assert.Equal(t, "mid", string(serverFrameOf(t, c, br, opPong)))
			write(t, c, clientFrame(opCont, appPing[7:10]))
			write(t, c, clientFrame(fin|opCont, appPing[10:]))
			assert.Equal(t, `{"type":"pong"}`, string(serverFrameOf(t, c, br, opText)))
		}},
		{"a frame over the limit gets 1009", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(fin|opText, make([]byte, 5000)))
			assert.Equal(t, websocket.CloseMessageTooBig, closeCode(t, serverFrameOf(t, c, br, opClose)))
		}},
		{"a frame over any watch frame gets 1009 at its header", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(fin|opText, make([]byte, 100_000))[:200])
			assert.Equal(t, websocket.CloseMessageTooBig, closeCode(t, serverFrameOf(t, c, br, opClose)))
		}},
		{"fragments over the limit get 1009", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(opText, make([]byte, 3000)))
			write(t, c, clientFrame(fin|opCont, make([]byte, 3000)))
			assert.Equal(t, websocket.CloseMessageTooBig, closeCode(t, serverFrameOf(t, c, br, opClose)))
		}},
		{"fragments over any watch frame get 1009 at the header past it", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(opText, make([]byte, 40_000)))
			write(t, c, clientFrame(opCont, make([]byte, 40_000))[:200])
			assert.Equal(t, websocket.CloseMessageTooBig, closeCode(t, serverFrameOf(t, c, br, opClose)))
		}},
		{"text that is not UTF-8 gets 1007", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(fin|opText, []byte{0xff, 0xfe}))
			assert.Equal(t, protocol.CloseInvalidPayload, closeCode(t, serverFrameOf(t, c, br, opClose)))
		}},
		{"an unmasked frame gets 1002", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(fin|opText|unmaskedFlag, appPing))
			assert.Equal(t, websocket.CloseProtocolError, closeCode(t, serverFrameOf(t, c, br, opClose)))
		}},
		{"a continuation with no message gets 1002", func(t *testing.T, _ *testServer, _ string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(fin|opCont, appPing))
			assert.Equal(t, websocket.CloseProtocolError, closeCode(t, serverFrameOf(t, c, br, opClose)))
		}},
		{"a close is echoed and the socket closed", func(t *testing.T, s *testServer, uid string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(fin|opClose, append(binary.BigEndian.AppendUint16(nil, 1000), "bye"...)))
			assert.Equal(t, websocket.CloseNormalClosure, closeCode(t, serverFrameOf(t, c, br, opClose)))
			ended(t, c, br)
		}},
		{"the socket ending inside a frame ends the connection", func(t *testing.T, s *testServer, uid string, c net.Conn, br *bufio.Reader) {
			write(t, c, clientFrame(fin|opText, appPing)[:5])
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			ended(t, c, br)
		}},
		{"an unanswered close frame: the socket is dropped", func(t *testing.T, s *testServer, uid string, c net.Conn, br *bufio.Reader) {
			require.NoError(t, s.hub.Disconnect(t.Context(), uid))
			assert.Equal(t, protocol.CloseDisconnected, closeCode(t, serverFrameOf(t, c, br, opClose)))
			ended(t, c, br) // after CloseTimeout, never answered
		}},
	}
	for _, mode := range []struct {
		name string
		park bool
	}{{"polled", false}, {"parked", true}} {
		t.Run(mode.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ParkReaders = mode.park
			cfg.CloseTimeout = 200 * time.Millisecond
			s := startServer(t, cfg)
			for i, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					uid := mode.name + "-" + string(rune('a'+i))
					c, br := s.upgradeRaw(t, uid)
					assert.Contains(t, string(serverFrameOf(t, c, br, opText)), `"type":"welcome"`)
					sc.run(t, s, uid, c, br)
					c.Close()
					require.Eventually(t, func() bool { return !s.user(t, uid).Online }, waitLong, 10*time.Millisecond,
						"%s still online after its socket closed", uid)
				})
			}
		})
	}
}
