//go:build unix

package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
)

// A real presenced stopped (SIGSTOP) for twice its timeout while its clients
// keep pinging: when it resumes, the pings waiting in its sockets keep every
// client, and only the one that really went silent is closed, within a
// timeout of the resume.
func TestFrozenServerClosesOnlyTheSilent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and freezes it for seconds")
	}
	const tick = 300 * time.Millisecond
	timeout := 10 * tick
	p := presencedtest.Start(t, presencedtest.Build(t), "-slots", "11", "-tick", tick.String())

	const pinging = 20
	var wg sync.WaitGroup
	stop := make(chan struct{})
	closed := make(chan string, pinging+1)
	for i := range pinging {
		ws, _, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://%s/ws?uid=live-%d", p.Addr, i), nil)
		require.NoError(t, err)
		defer ws.Close()
		wg.Add(2)
		go func() { // reads, answering the server's pings as a browser does
			defer wg.Done()
			for {
				if _, _, err := ws.ReadMessage(); err != nil {
					if !errors.Is(err, net.ErrClosed) {
						closed <- fmt.Sprintf("live-%d: %v", i, err)
					}
					return
				}
			}
		}()
		go func() { // and pings every tick, also while the server is stopped
			defer wg.Done()
			tk := time.NewTicker(tick)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					if ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)) != nil {
						return
					}
				}
			}
		}()
	}
	silent, _, err := websocket.DefaultDialer.Dial("ws://"+p.Addr+"/ws?uid=silent", nil)
	require.NoError(t, err)
	defer silent.Close()
	silent.SetPingHandler(func(string) error { return nil }) // a dead client: no pong
	_, _, err = silent.ReadMessage()
	require.NoError(t, err, "welcome")

	require.NoError(t, p.Signal(syscall.SIGSTOP))
	time.Sleep(2 * timeout) // the freeze under test, not a wait for a condition
	require.NoError(t, p.Signal(syscall.SIGCONT))
	resumed := time.Now()

	require.NoError(t, silent.SetReadDeadline(time.Now().Add(waitLong)))
	for err == nil {
		_, _, err = silent.ReadMessage()
	}
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce, "the silent client is closed")
	assert.Equal(t, 4408, ce.Code)
	t.Logf("silent client closed %v after the resume (timeout %v)", time.Since(resumed), timeout)

	// Two timeouts more of pinging: none of the others was or is closed.
	time.Sleep(2 * timeout)
	select {
	case c := <-closed:
		t.Fatalf("a pinging client was closed: %s", c)
	default:
	}
	_, body := get(t, p.URL+"/metrics")
	assert.Contains(t, body, `presenced_closes_total{reason="idle"} 1`)
	assert.True(t, strings.Contains(body, "presenced_connections 20"), "20 connections left")
	close(stop)
}
