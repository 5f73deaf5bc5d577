package main

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBaselineSpeaksTheLoadgenSubset(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv := newServer(timeout, slog.New(slog.DiscardHandler))
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	url := "ws" + strings.TrimPrefix(hs.URL, "http")

	_, resp, err := websocket.DefaultDialer.Dial(url+"?uid=bad%20id", nil)
	require.Error(t, err)
	assert.Equal(t, 400, resp.StatusCode)

	live, _, err := websocket.DefaultDialer.Dial(url+"?uid=live", nil)
	require.NoError(t, err)
	defer live.Close()
	silent, _, err := websocket.DefaultDialer.Dial(url+"?uid=silent", nil)
	require.NoError(t, err)
	defer silent.Close()
	silent.SetPingHandler(func(string) error { return nil }) // never answers

	var welcome struct {
		Type      string   `json:"type"`
		UID       string   `json:"uid"`
		TimeoutMS int64    `json:"timeout_ms"`
		Online    []string `json:"online"`
	}
	require.NoError(t, live.ReadJSON(&welcome))
	assert.Equal(t, "welcome", welcome.Type)
	assert.Equal(t, "live", welcome.UID)
	assert.EqualValues(t, 300, welcome.TimeoutMS)

	require.NoError(t, live.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)))
	_, msg, err := live.ReadMessage()
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"pong"}`, string(msg))
	require.NoError(t, live.WriteMessage(websocket.TextMessage, []byte(`nope`)))
	_, msg, err = live.ReadMessage()
	require.NoError(t, err)
	assert.Contains(t, string(msg), `"error"`)

	// The live client keeps reading, so gorilla answers the server's pings;
	// the silent one does not and is closed with 4408 after the timeout.
	liveErr := make(chan error, 1)
	go func() {
		for {
			if _, _, err := live.ReadMessage(); err != nil {
				liveErr <- err
				return
			}
		}
	}()
	start := time.Now()
	require.NoError(t, silent.SetReadDeadline(time.Now().Add(5*time.Second)))
	for {
		_, _, err = silent.ReadMessage()
		if err != nil {
			break
		}
	}
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, closeIdle, ce.Code)
	assert.Equal(t, "idle timeout", ce.Text)
	assert.GreaterOrEqual(t, time.Since(start), timeout-50*time.Millisecond)

	time.Sleep(2 * timeout) // the live client outlives two timeouts on pongs alone
	select {
	case err := <-liveErr:
		t.Fatalf("live client closed: %v", err)
	default:
	}
	srv.closeAll()
	err = <-liveErr
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, websocket.CloseGoingAway, ce.Code)
}
