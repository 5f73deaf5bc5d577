//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func startFloor(t *testing.T, timeout, tick time.Duration) string {
	t.Helper()
	s, err := listen("127.0.0.1:0", timeout, tick, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		s.Stop()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Stop")
		}
	})
	return s.Addr().String()
}

func TestFloorSpeaksTheLoadgenSubset(t *testing.T) {
	const timeout = 400 * time.Millisecond
	addr := startFloor(t, timeout, 20*time.Millisecond)
	url := "ws://" + addr + "/ws"

	resp, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	_, resp, err = websocket.DefaultDialer.Dial(url+"?uid=bad%20id", nil)
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	live, _, err := websocket.DefaultDialer.Dial(url+"?uid=live&channels=room-1", nil)
	require.NoError(t, err)
	defer live.Close()
	silent, _, err := websocket.DefaultDialer.Dial(url+"?uid=silent", nil)
	require.NoError(t, err)
	defer silent.Close()

	var welcome struct {
		Type      string `json:"type"`
		UID       string `json:"uid"`
		TimeoutMS int64  `json:"timeout_ms"`
		Protocol  string `json:"protocol"`
	}
	require.NoError(t, live.ReadJSON(&welcome))
	assert.Equal(t, "welcome", welcome.Type)
	assert.Equal(t, "live", welcome.UID)
	assert.EqualValues(t, timeout.Milliseconds(), welcome.TimeoutMS)
	assert.Equal(t, protocolVersion, welcome.Protocol)

	exchange := func(send string) string {
		require.NoError(t, live.WriteMessage(websocket.TextMessage, []byte(send)))
		_, msg, err := live.ReadMessage()
		require.NoError(t, err)
		return string(msg)
	}
	assert.JSONEq(t, `{"type":"pong"}`, exchange(`{"type":"ping"}`))
	var e struct{ Type, Error string }
	require.NoError(t, json.Unmarshal([]byte(exchange(`{"type":"chat"}`)), &e))
	assert.Equal(t, "error", e.Type)
	assert.NotEmpty(t, e.Error)

	// Keep live talking past the timeout; silent says nothing and is closed
	// with 4408 no earlier than the timeout after its welcome.
	start := time.Now()
	closed := make(chan error, 1)
	go func() {
		for {
			if _, _, err := silent.ReadMessage(); err != nil {
				closed <- err
				return
			}
		}
	}()
	var silentErr error
	for silentErr == nil {
		assert.JSONEq(t, `{"type":"pong"}`, exchange(`{"type":"ping"}`))
		select {
		case silentErr = <-closed:
		case <-time.After(timeout / 8):
		}
		require.Less(t, time.Since(start), 30*time.Second, "silent connection not closed")
	}
	assert.True(t, websocket.IsCloseError(silentErr, closeIdle), "got %v", silentErr)
	assert.GreaterOrEqual(t, time.Since(start), timeout-50*time.Millisecond)
	assert.JSONEq(t, `{"type":"pong"}`, exchange(`{"type":"ping"}`), "the live one is still open")
}

// TestFloorFramesInPieces sends a request and then a ping one byte at a
// time, and two pings in one write: each is answered once, in order.
func TestFloorFramesInPieces(t *testing.T) {
	addr := startFloor(t, 10*time.Second, 50*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	req := "GET /ws?uid=u1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	for i := range len(req) {
		_, err := c.Write([]byte{req[i]})
		require.NoError(t, err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	assert.Equal(t, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", resp.Header.Get("Sec-WebSocket-Accept"))
	welcome := readFrame(t, r)
	assert.Contains(t, string(welcome), `"uid":"u1"`)

	ping := maskedText([]byte(`{"type":"ping"}`))
	for i := range ping {
		_, err := c.Write(ping[i : i+1])
		require.NoError(t, err)
	}
	assert.Equal(t, `{"type":"pong"}`, string(readFrame(t, r)))
	_, err = c.Write(append(maskedText([]byte(`{"type":"ping"}`)), maskedText([]byte(`nope`))...))
	require.NoError(t, err)
	assert.Equal(t, `{"type":"pong"}`, string(readFrame(t, r)))
	assert.Contains(t, string(readFrame(t, r)), `"type":"error"`)

	// A frame over the limit is closed with 1009.
	_, err = c.Write([]byte{0x81, 0xfe, 0x20, 0x00})
	require.NoError(t, err)
	cl := readFrame(t, r)
	require.GreaterOrEqual(t, len(cl), 2)
	assert.Equal(t, closeTooBig, int(cl[0])<<8|int(cl[1]))
}

func maskedText(p []byte) []byte {
	mask := []byte{1, 2, 3, 4}
	b := []byte{0x81, 0x80 | byte(len(p))}
	b = append(b, mask...)
	for i, c := range p {
		b = append(b, c^mask[i&3])
	}
	return b
}

// readFrame reads one short unmasked frame and returns its payload.
func readFrame(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	var h [2]byte
	_, err := io.ReadFull(r, h[:])
	require.NoError(t, err)
	require.Less(t, int(h[1]), 126, "a short frame")
	p := make([]byte, h[1])
	_, err = io.ReadFull(r, p)
	require.NoError(t, err)
	return p
}
