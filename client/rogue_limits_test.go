package client_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// TestReadLimit: with a ReadLimit of 1 KiB, a frame under it arrives, and
// one over it ends the connection with 1009 before it is read; the Client
// reconnects.
func TestReadLimit(t *testing.T) {
	closed := make(chan error, 1)
	r := startRogue(t, func(n int64, ws *websocket.Conn) {
		if sendWelcome(ws) != nil {
			return
		}
		if n == 1 {
			small := json.RawMessage(`"` + strings.Repeat("s", 600) + `"`)
			big := json.RawMessage(`"` + strings.Repeat("b", 2000) + `"`)
			if send(ws, protocol.Publish{Channel: "lobby", Data: small}) != nil || send(ws, protocol.Publish{Channel: "lobby", Data: big}) != nil {
				return
			}
			closed <- hold(ws)
			return
		}
		_ = hold(ws)
	})
	opts := fast("alice")
	opts.ReadLimit = 1 << 10
	c := dialRogue(t, r, opts)
	var pub *protocol.Publish
	for pub == nil {
		pub, _ = next(t, c).(*protocol.Publish)
	}
	assert.Len(t, pub.Data, 602, "the frame under the limit")
	sc := nextState(t, c, client.Waiting)
	assert.ErrorIs(t, sc.Err, websocket.ErrReadLimit)
	select {
	case err := <-closed:
		assert.True(t, websocket.IsCloseError(err, websocket.CloseMessageTooBig), "close 1009, got %v", err)
	case <-time.After(waitLong):
		t.Fatal("the connection was not closed")
	}
	nextState(t, c, client.Live)
	assert.Equal(t, int64(2), r.upgrades.Load())
}

// TestHugeFrameIsNotRead: a server that sends a 64 MiB frame after the
// welcome costs the Client nothing near 64 MiB: the default limit ends
// the connection at the frame's header.
func TestHugeFrameIsNotRead(t *testing.T) {
	const size = 64 << 20
	r := startRogue(t, func(n int64, ws *websocket.Conn) {
		if sendWelcome(ws) != nil {
			return
		}
		if n == 1 {
			// One unmasked text frame with a 64-bit length, then its
			// payload for as long as the Client takes it.
			header := []byte{0x81, 127, 0, 0, 0, 0, 0, 0, 0, 0}
			binary.BigEndian.PutUint64(header[2:], size)
			nc := ws.NetConn()
			if _, err := nc.Write(header); err != nil {
				return
			}
			chunk := make([]byte, 64<<10)
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := nc.Write(chunk); err != nil {
					return
				}
			}
		}
		_ = hold(ws)
	})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := dialRogue(t, r, fast("alice"))
	sc := nextState(t, c, client.Waiting)
	assert.ErrorIs(t, sc.Err, websocket.ErrReadLimit)
	nextState(t, c, client.Live)
	runtime.GC()
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MiB frame: %.1f MiB allocated in all, heap %.1f -> %.1f MiB", size>>20,
		float64(allocated)/(1<<20), float64(before.HeapAlloc)/(1<<20), float64(after.HeapAlloc)/(1<<20))
	assert.Less(t, allocated, uint64(size/4), "bytes allocated while the frame came")
}

// dialBudget is the ctx Dial gets from the tests of its deadline.
const dialBudget = time.Second

// dialTimed dials url with a ctx of dialBudget, and returns how long Dial
// took past the deadline, and its error.
func dialTimed(t *testing.T, url string) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dialBudget)
	defer cancel()
	start := time.Now()
	c, err := client.Dial(ctx, url, fast("alice"))
	over := time.Since(start) - dialBudget
	if c != nil {
		c.Close()
	}
	return over, err
}

// TestDialHonoursItsDeadline: against a listener that accepts and never
// answers the handshake, and a server that upgrades and never sends the
// welcome, Dial returns at its ctx's deadline (its handshake timeout is
// longer) and leaves no connection open.
func TestDialHonoursItsDeadline(t *testing.T) {
	t.Run("no handshake", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
		gone := make(chan error, 1)
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				gone <- err
				return
			}
			defer nc.Close()
			// Reads the request, then EOF when the Client lets go; the
			// deadline makes a Client that never does fail the test.
			_ = nc.SetReadDeadline(time.Now().Add(waitLong))
			_, err = io.Copy(io.Discard, nc)
			gone <- err
		}()
		over, err := dialTimed(t, "ws://"+ln.Addr().String()+"/ws")
		t.Logf("returned %v after the deadline: %v", over, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, over, 2*time.Second, "past the deadline")
		select {
		case err := <-gone:
			assert.False(t, isTimeout(err), "the Client closed its connection: %v", err)
		case <-time.After(waitLong):
			t.Fatal("the connection is still open")
		}
	})
	t.Run("no welcome", func(t *testing.T) {
		gone := make(chan error, 1)
		r := startRogue(t, func(_ int64, ws *websocket.Conn) { gone <- hold(ws) })
		over, err := dialTimed(t, r.url)
		t.Logf("returned %v after the deadline: %v", over, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, over, 2*time.Second, "past the deadline")
		select {
		case err := <-gone:
			assert.False(t, isTimeout(err), "the Client closed its connection: %v", err)
		case <-time.After(waitLong):
			t.Fatal("the connection is still open")
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestCloseDuringAHungHandshake: Close returns at once while a reconnect
// waits for a welcome that never comes.
func TestCloseDuringAHungHandshake(t *testing.T) {
	r := startRogue(t, func(n int64, ws *websocket.Conn) {
		if n == 1 && sendWelcome(ws) == nil {
			_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		}
		_ = hold(ws)
	})
	c, err := client.Dial(ctxLong(t), r.url, fast("alice"))
	require.NoError(t, err)
	nextState(t, c, client.Waiting)
	nextState(t, c, client.Connecting)
	eventually(t, func() bool { return r.upgrades.Load() == 2 }, "the second connection upgraded")
	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	t.Logf("Close took %v", took)
	assert.Less(t, took, 2*time.Second)
}
