package transport_test

// Robustness under load and bad input, at the scale of hundreds of clients so
// it runs with the rest of the suite under -race. The large
// runs live in bench/scale.sh.

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

// TestSlowConsumerIsClosedAndOthersKeepChatting fills the send queue of a
// client that keeps sending keepalives but never reads, while eight others
// chat at full speed: the slow one is closed (its user goes offline and the
// others hear of it) and every chat reaches every other client.
func TestSlowConsumerIsClosedAndOthersKeepChatting(t *testing.T) {
	// The ring steps only by hand, so nobody idles out here, and the queue
	// holds every chat of the test, so a reader that a busy machine stalls is
	// not closed for a burst: the slow client is closed because a write to
	// it blocks for WriteTimeout.
	s := startServerWith(t, transport.Config{
		QueueBytes: 4 << 20, WriteTimeout: 2 * time.Second, CloseTimeout: 200 * time.Millisecond,
	}, serverOptions{sendBuffer: 64 << 10})

	slow, err := s.connect(dialer(4096), "slow", "lobby")
	require.NoError(t, err)
	defer slow.Close()

	// 480 chats of 3 KB (1.4 MB) overflow the slow client's socket buffers
	// (64 KB + 8 KB) well before the end.
	const chatters, perChatter = 8, 60
	text := strings.Repeat("x", 3000)
	// A chatter has at most window chats of its own not yet echoed back, so
	// its chats never fill the queue of those waiting for the engine, however
	// slowly a busy machine hands them over.
	const window = 8
	var (
		conns      []*websocket.Conn
		readers    sync.WaitGroup
		got        = make([]atomic.Int64, chatters)
		echoes     = make([]chan struct{}, chatters)
		refused    atomic.Int64 // error frames: chats the server did not take
		sawOffline = make([]atomic.Bool, chatters)
		readErrs   = make(chan error, chatters)
	)
	for i := range chatters {
		ws, err := s.connect(dialer(0), fmt.Sprintf("chat-%d", i), "lobby")
		require.NoError(t, err)
		defer ws.Close()
		conns = append(conns, ws)
		echoes[i] = make(chan struct{}, perChatter)
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				_, data, err := ws.ReadMessage()
				if err != nil {
					var ce *websocket.CloseError
					if !errors.As(err, &ce) && !errors.Is(err, net.ErrClosed) {
						readErrs <- fmt.Errorf("chatter %d: %w", i, err)
					} else if ce != nil && ce.Code != websocket.CloseNormalClosure && ce.Code != websocket.CloseGoingAway {
						readErrs <- fmt.Errorf("chatter %d closed by the server: %w", i, err)
					}
					return
				}
				var m struct {
					Type, From string
					Leaves     []string
				}
				if json.Unmarshal(data, &m) != nil {
					continue
				}
				switch {
				case m.Type == "chat" && strings.HasPrefix(m.From, "chat-"):
					got[i].Add(1)
					if m.From == fmt.Sprintf("chat-%d", i) {
						echoes[i] <- struct{}{}
					}
				case m.Type == "error":
					refused.Add(1)
				case m.Type == "presence" && slices.Contains(m.Leaves, "slow"):
					sawOffline[i].Store(true)
				}
			}
		}()
	}

	frame := fmt.Sprintf(`{"type":"chat","channel":"lobby","text":%q}`, text)
	var senders sync.WaitGroup
	sendErrs := make(chan error, chatters)
	for i, ws := range conns {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for k := range perChatter {
				if k >= window {
					select {
					case <-echoes[i]:
					case <-time.After(waitLong):
						sendErrs <- fmt.Errorf("chatter %d: chat %d not echoed", i, k-window)
						return
					}
				}
				if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
					sendErrs <- fmt.Errorf("chatter %d send: %w", i, err)
					return
				}
				time.Sleep(5 * time.Millisecond) // busy, but not a flood that overflows everyone's queue
			}
		}()
	}
	senders.Wait()
	close(sendErrs)
	for err := range sendErrs {
		require.NoError(t, err)
	}

	const total = chatters * perChatter
	require.Zero(t, refused.Load(), "chats refused")
	require.Eventually(t, func() bool {
		for i := range got {
			if got[i].Load() < total {
				return false
			}
		}
		return true
	}, waitLong, 10*time.Millisecond, "a chatter stalled behind the slow consumer")
	require.Eventually(t, func() bool { return !s.user(t, "slow").Online }, waitLong, 20*time.Millisecond,
		"the slow consumer was not closed")
	s.step(1) // its leaving the lobby goes out at the tick
	require.Eventually(t, func() bool {
		for i := range sawOffline {
			if !sawOffline[i].Load() {
				return false
			}
		}
		return true
	}, waitLong, 10*time.Millisecond, "chatters did not hear that the slow consumer left")
	for i := range got {
		assert.EqualValues(t, total, got[i].Load(), "chatter %d got a chat twice", i)
	}
	for i := range chatters {
		assert.True(t, s.user(t, fmt.Sprintf("chat-%d", i)).Online)
	}

	// The slow client finds, once it reads, that the server ended it: a
	// close frame 1008 if it fit in the buffers, else a dropped connection
	// (gorilla reports 1006).
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(waitLong)))
	for {
		_, _, err := slow.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			assert.Contains(t, []int{protocol.ClosePolicyViolation, websocket.CloseAbnormalClosure}, ce.Code)
		} else {
			var ne net.Error
			assert.False(t, errors.As(err, &ne) && ne.Timeout(), "slow client still open: %v", err)
		}
		break
	}

	for _, ws := range conns {
		ws.Close()
	}
	readers.Wait()
	close(readErrs)
	for err := range readErrs {
		assert.NoError(t, err)
	}
}

// TestBurstOfConnectionsLeaksNoGoroutine opens 1,000 WebSockets at once and
// closes them, half with a close handshake and half by dropping the socket:
// the goroutine count returns to where it was and nobody stays online.
func TestBurstOfConnectionsLeaksNoGoroutine(t *testing.T) {
	s := startServer(t, testConfig())
	s.alive(t, "warmup") // starts whatever the server starts lazily
	require.Eventually(t, func() bool { return s.onlineCount(t) == 0 }, waitLong, 10*time.Millisecond)
	http.DefaultClient.CloseIdleConnections()
	base := runtime.NumGoroutine()

	const n, users, parallel = 1000, 10, 50
	conns := make([]*websocket.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	d := dialer(0)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ws, err := s.connect(d, fmt.Sprintf("burst-%d", i%users))
			if err != nil {
				errs <- err
				return
			}
			conns[i] = ws
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, n/users, s.user(t, "burst-3").Connections)
	held := runtime.NumGoroutine()
	assert.Less(t, held, base+n/10, "an idle polled connection holds no goroutine")

	for i, ws := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				_ = ws.WriteControl(websocket.CloseMessage,
					websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
			}
			ws.Close()
		}()
	}
	wg.Wait()

	require.Eventually(t, func() bool { return s.onlineCount(t) == 0 }, waitLong, 20*time.Millisecond,
		"users still online after every connection closed")
	http.DefaultClient.CloseIdleConnections()
	var now int
	require.Eventually(t, func() bool {
		now = runtime.NumGoroutine()
		return now <= base+2 // slack for runtime helpers that come and go
	}, waitLong, 20*time.Millisecond, "goroutines did not settle: base %d", base)
	t.Logf("goroutines: base %d, with %d connections %d, after %d", base, n, held, now)
	s.alive(t, "after-burst")
}

// TestGarbageAndHalfOpenConnectionsDoNotWedgeTheServer throws bad bytes and
// unfinished connections at /ws, many at once, and checks that each is
// closed, none counts as a user, and the server keeps serving real clients
// throughout.
func TestGarbageAndHalfOpenConnectionsDoNotWedgeTheServer(t *testing.T) {
	// Half-sent requests end at the header timeout, and upgraded sockets that
	// stall at the idle timeout: the test steps the ring while it waits.
	s := startServerWith(t, transport.Config{CloseTimeout: 200 * time.Millisecond},
		serverOptions{headerTimeout: 500 * time.Millisecond})
	garbage := make([]byte, 4096)
	_, _ = rand.Read(garbage)

	cases := []struct {
		name string
		open func(t *testing.T, uid string) (net.Conn, io.Reader)
	}{
		{"random bytes instead of HTTP", func(t *testing.T, _ string) (net.Conn, io.Reader) {
			c, err := net.Dial("tcp", s.addr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			_, err = c.Write(garbage)
			require.NoError(t, err)
			return c, c
		}},
		{"connect and say nothing", func(t *testing.T, _ string) (net.Conn, io.Reader) {
			c, err := net.Dial("tcp", s.addr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			return c, c
		}},
		{"unfinished upgrade request", func(t *testing.T, uid string) (net.Conn, io.Reader) {
			c, err := net.Dial("tcp", s.addr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			_, err = fmt.Fprintf(c, "GET /ws?uid=%s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n", uid)
			require.NoError(t, err)
			return c, c
		}},
		{"random bytes after the upgrade", func(t *testing.T, uid string) (net.Conn, io.Reader) {
			c, br := s.upgradeRaw(t, uid)
			_, err := c.Write(garbage) // unmasked, bad opcodes: a protocol error
			require.NoError(t, err)
			return c, br
		}},
		{"a frame header that promises more than comes", func(t *testing.T, uid string) (net.Conn, io.Reader) {
			c, br := s.upgradeRaw(t, uid)
			// masked text frame of 1000 bytes, of which only 10 are sent
			_, err := c.Write(append([]byte{0x81, 0x80 | 126, 0x03, 0xe8, 1, 2, 3, 4}, make([]byte, 10)...))
			require.NoError(t, err)
			return c, br
		}},
		{"upgraded, then silent and never reading", func(t *testing.T, uid string) (net.Conn, io.Reader) {
			return s.upgradeRaw(t, uid)
		}},
	}
	const each = 20
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			uid := strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
			type opened struct {
				c net.Conn
				r io.Reader
			}
			var cs []opened
			for range each {
				c, r := tc.open(t, uid)
				cs = append(cs, opened{c, r})
			}
			s.alive(t, "alive-"+uid[:6]) // the server serves while they hang
			stop := s.stepEvery(time.Millisecond)
			for _, o := range cs {
				ended(t, o.c, o.r)
			}
			stop()
			require.Eventually(t, func() bool { return !s.user(t, uid).Online }, waitLong, 10*time.Millisecond)
			s.alive(t, "after-"+uid[:6])
		})
	}
}

// TestReconnectStormLeavesOneCorrectPresence has one user connect and drop
// connections from many goroutines at once, in every way a client can end.
// When the storm is over and one connection remains, the user is online with
// exactly that connection; an observer saw online and offline strictly
// alternate and ends on the true state, with and without a grace period.
func TestReconnectStormLeavesOneCorrectPresence(t *testing.T) {
	cases := []struct {
		name  string
		grace time.Duration
	}{
		{"no grace", 0},
		{"grace of two ticks", 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, transport.Config{Grace: tc.grace, CloseTimeout: 200 * time.Millisecond})
			obs, err := s.connect(dialer(0), "observer")
			require.NoError(t, err)
			defer obs.Close()
			require.NoError(t, obs.WriteMessage(websocket.TextMessage, []byte(`{"type":"watch","uids":["storm"]}`)))
			_, watching, err := obs.ReadMessage()
			require.NoError(t, err)
			require.Equal(t, `{"type":"watching","online":[]}`, string(watching))
			// The observer keeps itself alive while the test ticks the ring.
			stopPings := make(chan struct{})
			pingsDone := make(chan struct{})
			go func() {
				defer close(pingsDone)
				for {
					select {
					case <-stopPings:
						return
					case <-time.After(5 * time.Millisecond):
						if obs.WriteControl(websocket.PingMessage, nil, time.Now().Add(waitLong)) != nil {
							return
						}
					}
				}
			}()
			defer func() { close(stopPings); <-pingsDone }()
			var (
				mu     sync.Mutex
				edges  []bool
				obsErr = make(chan error, 1)
			)
			go func() {
				for {
					_, data, err := obs.ReadMessage()
					if err != nil {
						obsErr <- err
						return
					}
					var m struct {
						Type            string
						Online, Offline []string
					}
					if json.Unmarshal(data, &m) != nil || m.Type != "status" {
						continue
					}
					mu.Lock()
					if slices.Contains(m.Online, "storm") {
						edges = append(edges, true)
					}
					if slices.Contains(m.Offline, "storm") {
						edges = append(edges, false)
					}
					mu.Unlock()
				}
			}()

			const workers, rounds = 20, 15
			stopTicks := s.stepEvery(20 * time.Millisecond) // ticks fall among the reconnects
			var wg sync.WaitGroup
			errs := make(chan error, workers*rounds)
			d := dialer(0)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						ws, err := s.connect(d, "storm")
						if err != nil {
							errs <- err
							return
						}
						switch (w + r) % 3 {
						case 0: // polite close handshake
							_ = ws.WriteControl(websocket.CloseMessage,
								websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
							ws.Close()
						case 1: // socket dropped
							ws.Close()
						case 2: // a chat, then dropped mid-conversation
							_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"chat","channel":"lobby","text":"brb"}`))
							ws.Close()
						}
					}
				}()
			}
			wg.Wait()
			stopTicks()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}

			last, err := s.connect(d, "storm")
			require.NoError(t, err)
			defer last.Close()
			require.Eventually(t, func() bool {
				p := s.user(t, "storm")
				return p.Online && p.Connections == 1
			}, waitLong, 10*time.Millisecond, "after the storm: %+v", s.user(t, "storm"))
			s.step(1)
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(edges) > 0 && edges[len(edges)-1]
			}, waitLong, 10*time.Millisecond, "observer does not see storm online")

			// It stays so: no late close of an old connection, nor a grace
			// period one of them started, takes it offline.
			s.step(5)
			require.NoError(t, last.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)))
			p := s.user(t, "storm")
			assert.True(t, p.Online)
			assert.Equal(t, 1, p.Connections)

			last.Close()
			stop := s.stepEvery(10 * time.Millisecond) // for the grace period to end
			require.Eventually(t, func() bool { return !s.user(t, "storm").Online }, waitLong, 10*time.Millisecond)
			stop()
			s.step(1) // the tick that tells of it
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(edges) > 0 && !edges[len(edges)-1]
			}, waitLong, 10*time.Millisecond, "observer does not see storm offline")

			mu.Lock()
			defer mu.Unlock()
			for i, e := range edges {
				require.Equal(t, i%2 == 0, e, "presence edges must alternate, starting online: %v", edges)
			}
			assert.Equal(t, 0, s.user(t, "storm").Connections)
			select {
			case err := <-obsErr:
				require.NoError(t, err, "observer lost its connection")
			default:
			}
		})
	}
}
