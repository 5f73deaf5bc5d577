package transport_test

// Robustness under load and bad input, at the scale of hundreds of clients so
// it runs with the rest of the suite under -race (issue 6, item 5). The large
// runs live in bench/scale.sh.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

const rbWait = 10 * time.Second

type rbServer struct {
	hub  *transport.Hub
	http string // http://127.0.0.1:port
	ws   string // ws://127.0.0.1:port/ws
	addr string // 127.0.0.1:port
}

// rbStart serves a Hub for cfg the way cmd/presenced does: an http.Server
// with a header timeout, so a client that never finishes its request is
// dropped.
func rbStart(t *testing.T, cfg transport.Config) *rbServer {
	return rbStartBuf(t, cfg, 0)
}

// rbStartBuf is rbStart with the socket send buffer of every accepted
// connection fixed at sndBuf bytes (0: the kernel's autotuning, which on
// loopback grows to megabytes and would hide a client that stops reading).
func rbStartBuf(t *testing.T, cfg transport.Config, sndBuf int) *rbServer {
	t.Helper()
	hub, err := transport.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(hub)
	srv.Config.ReadHeaderTimeout = 300 * time.Millisecond
	if sndBuf > 0 {
		srv.Listener = rbSmallSendBuffers{srv.Listener, sndBuf}
	}
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), rbWait)
		defer cancel()
		assert.NoError(t, hub.Shutdown(ctx))
		srv.Close()
	})
	addr := srv.Listener.Addr().String()
	return &rbServer{hub: hub, http: srv.URL, ws: "ws://" + addr + "/ws", addr: addr}
}

// rbDialer dials clients; rcvBuf > 0 shrinks the client's socket receive
// buffer, so a client that stops reading backs up into the server quickly.
func rbDialer(rcvBuf int) *websocket.Dialer {
	nd := &net.Dialer{Timeout: rbWait}
	if rcvBuf > 0 {
		// Before connect, so the window offered in the handshake is small too.
		nd.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvBuf)
			})
			return errors.Join(err, serr)
		}
	}
	return &websocket.Dialer{HandshakeTimeout: rbWait, NetDialContext: nd.DialContext}
}

// rbDial opens a WebSocket as uid and reads its welcome frame. It returns an
// error rather than failing, so goroutines may call it.
func (s *rbServer) rbDial(d *websocket.Dialer, uid string) (*websocket.Conn, error) {
	ws, resp, err := d.Dial(s.ws+"?uid="+uid, nil)
	if resp != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", uid, err)
	}
	var m struct{ Type string }
	_ = ws.SetReadDeadline(time.Now().Add(rbWait))
	if err := ws.ReadJSON(&m); err != nil || m.Type != "welcome" {
		ws.Close()
		return nil, fmt.Errorf("welcome for %s: type %q, err %v", uid, m.Type, err)
	}
	_ = ws.SetReadDeadline(time.Time{})
	return ws, nil
}

type rbSmallSendBuffers struct {
	net.Listener
	size int
}

func (l rbSmallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := c.(*net.TCPConn).SetWriteBuffer(l.size); err != nil {
		c.Close()
		return nil, fmt.Errorf("set send buffer: %w", err)
	}
	return c, nil
}

type rbPresence struct {
	Online      bool `json:"online"`
	Connections int  `json:"connections"`
}

func (s *rbServer) presence(t *testing.T, uid string) rbPresence {
	t.Helper()
	resp, err := http.Get(s.http + "/api/presence/" + uid)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var p rbPresence
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p
}

func (s *rbServer) onlineCount(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(s.http + "/api/presence?limit=0")
	require.NoError(t, err)
	defer resp.Body.Close()
	var p struct{ Count int }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p.Count
}

// rbAlive checks the server still serves a fresh client promptly: welcome,
// then a pong for a ping.
func (s *rbServer) rbAlive(t *testing.T, uid string) {
	t.Helper()
	ws, err := s.rbDial(rbDialer(0), uid)
	require.NoError(t, err)
	defer ws.Close()
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)))
	require.NoError(t, ws.SetReadDeadline(time.Now().Add(2*time.Second)))
	for {
		_, data, err := ws.ReadMessage()
		require.NoError(t, err, "server did not answer a ping")
		if string(data) == `{"type":"pong"}` {
			return
		}
	}
}

// TestSlowConsumerIsClosedAndOthersKeepChatting fills the send queue of a
// client that keeps sending keepalives but never reads, while eight others
// chat at full speed: the slow one is closed (its user goes offline and the
// others hear of it) and every chat reaches every other client.
func TestSlowConsumerIsClosedAndOthersKeepChatting(t *testing.T) {
	s := rbStartBuf(t, transport.Config{
		Slots: 41, Tick: 50 * time.Millisecond, // 2 s timeout: nobody idles out here
		WriteTimeout: 300 * time.Millisecond, CloseTimeout: 200 * time.Millisecond, // default queue: 256 frames
	}, 64<<10)

	slow, err := s.rbDial(rbDialer(4096), "slow")
	require.NoError(t, err)
	defer slow.Close()
	stopPings := make(chan struct{})
	pingsDone := make(chan struct{})
	go func() { // keepalives only: it must be closed for not reading, not for idling
		defer close(pingsDone)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopPings:
				return
			case <-tk.C:
				_ = slow.SetWriteDeadline(time.Now().Add(time.Second))
				if slow.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)) != nil {
					return
				}
			}
		}
	}()
	defer func() { close(stopPings); <-pingsDone }()

	// 480 chats of 3 KB (1.4 MB) overflow the slow client's 256-frame queue
	// and its socket buffers (64 KB + 8 KB) well before the end.
	const chatters, perChatter = 8, 60
	text := strings.Repeat("x", 3000)
	var (
		conns      []*websocket.Conn
		readers    sync.WaitGroup
		got        = make([]atomic.Int64, chatters)
		sawOffline = make([]atomic.Bool, chatters)
		readErrs   = make(chan error, chatters)
	)
	for i := range chatters {
		ws, err := s.rbDial(rbDialer(0), fmt.Sprintf("chat-%d", i))
		require.NoError(t, err)
		defer ws.Close()
		conns = append(conns, ws)
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
					Type, From, UID string
					Online          bool
				}
				if json.Unmarshal(data, &m) != nil {
					continue
				}
				switch {
				case m.Type == "chat" && strings.HasPrefix(m.From, "chat-"):
					got[i].Add(1)
				case m.Type == "presence" && m.UID == "slow" && !m.Online:
					sawOffline[i].Store(true)
				}
			}
		}()
	}

	frame := fmt.Sprintf(`{"type":"chat","text":%q}`, text)
	var senders sync.WaitGroup
	sendErrs := make(chan error, chatters)
	for i, ws := range conns {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for range perChatter {
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
	require.Eventually(t, func() bool {
		for i := range got {
			if got[i].Load() < total {
				return false
			}
		}
		return true
	}, rbWait, 10*time.Millisecond, "a chatter stalled behind the slow consumer")
	require.Eventually(t, func() bool { return !s.presence(t, "slow").Online }, rbWait, 20*time.Millisecond,
		"the slow consumer was not closed")
	require.Eventually(t, func() bool {
		for i := range sawOffline {
			if !sawOffline[i].Load() {
				return false
			}
		}
		return true
	}, rbWait, 10*time.Millisecond, "chatters did not hear that the slow consumer went offline")
	for i := range got {
		assert.EqualValues(t, total, got[i].Load(), "chatter %d got a chat twice", i)
	}
	for i := range chatters {
		assert.True(t, s.presence(t, fmt.Sprintf("chat-%d", i)).Online)
	}

	// The slow client finds, once it reads, that the server ended it: a
	// close frame 1008 if it fit in the buffers, else a dropped connection
	// (gorilla reports 1006).
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(rbWait)))
	for {
		_, _, err := slow.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			assert.Contains(t, []int{transport.CloseSlowConsumer, websocket.CloseAbnormalClosure}, ce.Code)
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
	// A 10 s timeout: dialling 1,000 clients that never answer pings may take
	// over a second under -race on a loaded machine.
	s := rbStart(t, transport.Config{Slots: 201, Tick: 50 * time.Millisecond})
	s.rbAlive(t, "warmup") // starts whatever the server starts lazily
	require.Eventually(t, func() bool { return s.onlineCount(t) == 0 }, rbWait, 10*time.Millisecond)
	http.DefaultClient.CloseIdleConnections()
	base := runtime.NumGoroutine()

	const n, users, parallel = 1000, 10, 50
	conns := make([]*websocket.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	d := rbDialer(0)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ws, err := s.rbDial(d, fmt.Sprintf("burst-%d", i%users))
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
	assert.Equal(t, n/users, s.presence(t, "burst-3").Connections)
	assert.Greater(t, runtime.NumGoroutine(), base+n/2, "the server should hold a reader per connection")

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

	require.Eventually(t, func() bool { return s.onlineCount(t) == 0 }, rbWait, 20*time.Millisecond,
		"users still online after every connection closed")
	http.DefaultClient.CloseIdleConnections()
	var now int
	require.Eventually(t, func() bool {
		now = runtime.NumGoroutine()
		return now <= base+2 // slack for runtime helpers that come and go
	}, rbWait, 20*time.Millisecond, "goroutines did not settle: base %d", base)
	t.Logf("goroutines: base %d, with %d connections > %d, after %d", base, n, base+n/2, now)
	s.rbAlive(t, "after-burst")
}

// rbUpgradeRaw performs the WebSocket handshake by hand on a raw TCP
// connection, so the test can then write bytes no client library would.
func rbUpgradeRaw(t *testing.T, s *rbServer, uid string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.addr, rbWait)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	fmt.Fprintf(c, "GET /ws?uid=%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", uid, s.addr, base64.StdEncoding.EncodeToString(key))
	br := bufio.NewReader(c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(rbWait)))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	return c, br
}

// rbEnded reports whether the server closed c: it reads (and discards) until
// EOF or a reset, failing on a timeout.
func rbEnded(t *testing.T, c net.Conn, r io.Reader) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(rbWait)))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "server did not close the connection")
}

// TestGarbageAndHalfOpenConnectionsDoNotWedgeTheServer throws bad bytes and
// unfinished connections at /ws, many at once, and checks that each is
// closed, none counts as a user, and the server keeps serving real clients
// throughout.
func TestGarbageAndHalfOpenConnectionsDoNotWedgeTheServer(t *testing.T) {
	s := rbStart(t, transport.Config{Slots: 11, Tick: 20 * time.Millisecond, CloseTimeout: 200 * time.Millisecond})
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
			c, br := rbUpgradeRaw(t, s, uid)
			_, err := c.Write(garbage) // unmasked, bad opcodes: a protocol error
			require.NoError(t, err)
			return c, br
		}},
		{"a frame header that promises more than comes", func(t *testing.T, uid string) (net.Conn, io.Reader) {
			c, br := rbUpgradeRaw(t, s, uid)
			// masked text frame of 1000 bytes, of which only 10 are sent
			_, err := c.Write(append([]byte{0x81, 0x80 | 126, 0x03, 0xe8, 1, 2, 3, 4}, make([]byte, 10)...))
			require.NoError(t, err)
			return c, br
		}},
		{"upgraded, then silent and never reading", func(t *testing.T, uid string) (net.Conn, io.Reader) {
			return rbUpgradeRaw(t, s, uid)
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
			s.rbAlive(t, "alive-"+uid[:6]) // the server serves while they hang
			for _, o := range cs {
				rbEnded(t, o.c, o.r)
			}
			require.Eventually(t, func() bool { return !s.presence(t, uid).Online }, rbWait, 10*time.Millisecond)
			s.rbAlive(t, "after-"+uid[:6])
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
		{"grace of two ticks", 40 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A 2 s timeout: 20 dialers under -race on a loaded machine can
			// take a connection's welcome past a shorter one.
			s := rbStart(t, transport.Config{Slots: 101, Tick: 20 * time.Millisecond, Grace: tc.grace,
				CloseTimeout: 200 * time.Millisecond})
			obs, err := s.rbDial(rbDialer(0), "observer")
			require.NoError(t, err)
			defer obs.Close()
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
						Type, UID string
						Online    bool
					}
					if json.Unmarshal(data, &m) == nil && m.Type == "presence" && m.UID == "storm" {
						mu.Lock()
						edges = append(edges, m.Online)
						mu.Unlock()
					}
				}
			}()

			const workers, rounds = 20, 15
			var wg sync.WaitGroup
			errs := make(chan error, workers*rounds)
			d := rbDialer(0)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						ws, err := s.rbDial(d, "storm")
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
							_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"chat","text":"brb"}`))
							ws.Close()
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}

			last, err := s.rbDial(d, "storm")
			require.NoError(t, err)
			defer last.Close()
			require.Eventually(t, func() bool {
				p := s.presence(t, "storm")
				return p.Online && p.Connections == 1
			}, rbWait, 10*time.Millisecond, "after the storm: %+v", s.presence(t, "storm"))
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(edges) > 0 && edges[len(edges)-1]
			}, rbWait, 10*time.Millisecond, "observer does not see storm online")

			// It stays so: no late close of an old connection takes it offline.
			require.NoError(t, last.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)))
			time.Sleep(5 * 20 * time.Millisecond)
			p := s.presence(t, "storm")
			assert.True(t, p.Online)
			assert.Equal(t, 1, p.Connections)

			last.Close()
			require.Eventually(t, func() bool { return !s.presence(t, "storm").Online }, rbWait, 10*time.Millisecond)
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(edges) > 0 && !edges[len(edges)-1]
			}, rbWait, 10*time.Millisecond, "observer does not see storm offline")

			mu.Lock()
			defer mu.Unlock()
			for i, e := range edges {
				require.Equal(t, i%2 == 0, e, "presence edges must alternate, starting online: %v", edges)
			}
			assert.Equal(t, 0, s.presence(t, "storm").Connections)
			select {
			case err := <-obsErr:
				require.NoError(t, err, "observer lost its connection")
			default:
			}
		})
	}
}
