package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
)

// closeAtOnce sends the welcome and closes with code.
func closeAtOnce(ws *websocket.Conn, code int) {
	if sendWelcome(ws) == nil {
		_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""))
		_ = hold(ws)
	}
}

// shortest is the least wait before reconnect attempt n (from 0) that the
// backoff allows: its base halved by the jitter.
func shortest(n int, lo, hi time.Duration) time.Duration {
	return min(lo<<n, hi) / 2
}

// mostAttempts is the most connections a Client can make within window
// when each dies at once: the first, and one more after each of the
// shortest waits that fit.
func mostAttempts(window, lo, hi time.Duration) int {
	n, spent := 0, time.Duration(0)
	for spent+shortest(n, lo, hi) <= window {
		spent += shortest(n, lo, hi)
		n++
	}
	return n + 1
}

// waits reads c's events until n Waiting states came, and returns their
// delays.
func waits(t *testing.T, c *client.Client, n int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for len(out) < n {
		out = append(out, nextState(t, c, client.Waiting).Delay)
	}
	return out
}

// TestBackoffGrowsWhileConnectionsDieYoung: a server that sends the
// welcome and closes with 1000 at once is a live connection each time, but
// never a stable one: the waits keep doubling to MaxBackoff, and the
// attempts over a window stay within what that schedule allows.
func TestBackoffGrowsWhileConnectionsDieYoung(t *testing.T) {
	const (
		lo, hi = 20 * time.Millisecond, 200 * time.Millisecond
		window = 3 * time.Second
	)
	r := startRogue(t, func(_ int64, ws *websocket.Conn) { closeAtOnce(ws, websocket.CloseNormalClosure) })
	opts := client.Options{UID: "alice", MinBackoff: lo, MaxBackoff: hi}
	start := time.Now()
	c := dialRogue(t, r, opts)
	var delays []time.Duration
	for deadline := time.After(window - time.Since(start)); ; {
		select {
		case ev := <-c.Events():
			if sc, ok := ev.(*client.StateChange); ok && sc.State == client.Waiting {
				delays = append(delays, sc.Delay)
			}
			continue
		case <-deadline:
		}
		break
	}
	attempts := int(r.upgrades.Load())
	bound := mostAttempts(window, lo, hi)
	t.Logf("%d connections in %v: at most %d allowed (starting over after each live one allowed %d); first waits %v",
		attempts, window, bound, int(window/(lo/2))+1, delays[:min(len(delays), 8)])
	t.Logf("scaled to 60 s with the default backoff (0.5 s to 15 s): at most %d connections",
		mostAttempts(time.Minute, 500*time.Millisecond, 15*time.Second))
	assert.LessOrEqual(t, attempts, bound)
	assert.GreaterOrEqual(t, attempts, 3, "it does reconnect")
	for i, d := range delays {
		if !assert.GreaterOrEqual(t, d, shortest(i, lo, hi), "wait %d", i) || !assert.LessOrEqual(t, d, min(lo<<i, hi), "wait %d", i) {
			break
		}
	}
}

// TestBackoffStartsOverAfterAStableConnection: the waits grow over four
// connections that die at once, and start over after a connection that
// stayed live past the stable time.
func TestBackoffStartsOverAfterAStableConnection(t *testing.T) {
	client.SetStableAfter(t, 300*time.Millisecond)
	const lo, hi = 20 * time.Millisecond, time.Second
	r := startRogue(t, func(n int64, ws *websocket.Conn) {
		switch {
		case n <= 4:
			closeAtOnce(ws, websocket.CloseNormalClosure)
		case n == 5:
			if sendWelcome(ws) == nil {
				time.Sleep(time.Second)
				_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""))
				_ = hold(ws)
			}
		default:
			_ = sendWelcome(ws)
			_ = hold(ws)
		}
	})
	c := dialRogue(t, r, client.Options{UID: "alice", MinBackoff: lo, MaxBackoff: hi})
	delays := waits(t, c, 5)
	t.Logf("waits %v", delays)
	for i := range 4 {
		assert.GreaterOrEqual(t, delays[i], shortest(i, lo, hi), "wait %d", i)
	}
	assert.LessOrEqual(t, delays[4], lo, "after a stable connection")
	nextState(t, c, client.Live)
}

// TestTokenRefusedAtOnceBacksOff: a server that closes with 4401 as soon
// as the Client is live, whatever token it brings, gets each new token
// after a growing wait, not at once.
func TestTokenRefusedAtOnceBacksOff(t *testing.T) {
	const lo, hi = 20 * time.Millisecond, time.Second
	r := startRogue(t, func(_ int64, ws *websocket.Conn) { closeAtOnce(ws, protocol.CloseTokenExpired) })
	opts := client.Options{Token: "first", MinBackoff: lo, MaxBackoff: hi}
	opts.RefreshToken = func(ctx context.Context) (string, error) { return "another", nil }
	c := dialRogue(t, r, opts)
	delays := waits(t, c, 5)
	t.Logf("waits %v", delays)
	for i, d := range delays {
		require.GreaterOrEqual(t, d, shortest(i, lo, hi), "wait %d", i)
	}
}
