package transport_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

// longestWatch is a watch frame of MaxWatch IDs of the longest legal
// length, separated as sep says (JSON.stringify writes ",", Python's json
// module ", ").
func longestWatch(sep string) string {
	uids := make([]string, protocol.MaxWatch)
	for i := range uids {
		id := fmt.Sprintf("u%d-", i)
		uids[i] = `"` + id + strings.Repeat("x", protocol.MaxUIDLen-len(id)) + `"`
	}
	return `{"type":"watch","uids":[` + strings.Join(uids, sep) + `]}`
}

// A watch frame of the longest list of the longest IDs is answered at the
// default MaxMessage, in one frame, by both readers; any other frame over
// MaxMessage still closes with 1009.
func TestLongestWatchFrameAtDefaults(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ParkReaders = mode.park
			s := startServer(t, cfg)
			for i, sep := range []string{",", ", "} {
				frame := longestWatch(sep)
				require.Greater(t, len(frame), transport.DefaultMaxMessage*16)
				ws, _ := s.dial(t, fmt.Sprintf("watcher-%d", i))
				send(t, ws, frame)
				readUntil(t, ws, `{"type":"watching","online":[]}`)
				send(t, ws, `{"type":"ping"}`)
				readUntil(t, ws, `{"type":"pong"}`)
			}

			ws, _ := s.dial(t, "chatter")
			send(t, ws, `{"type":"join","channel":"c"}`)
			readUntil(t, ws, `{"type":"joined","channel":"c","count":1,"members":["chatter"]}`)
			chat := `{"type":"chat","channel":"c","text":"` + strings.Repeat("x", 5000) + `"}`
			send(t, ws, chat)
			assert.Equal(t, websocket.CloseMessageTooBig, readClose(t, ws).Code, "a chat over MaxMessage")
			s.waitMetric(t, "presenced_closes_total", map[string]string{"reason": "too_big"}, 1)
		})
	}
}

// The Hub negotiates no extension: a client offering permessage-deflate
// gets plain frames, and a frame with an RSV bit set, which only an
// extension could give a meaning, is refused with 1002 by both readers.
func TestNoCompressionAndRSVRefused(t *testing.T) {
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ParkReaders = mode.park
			s := startServer(t, cfg)

			d := dialer(0)
			d.EnableCompression = true
			ws, resp, err := d.Dial(s.wsURL("uid=deflater"), nil)
			require.NoError(t, err)
			resp.Body.Close()
			defer ws.Close()
			assert.Empty(t, resp.Header.Values("Sec-WebSocket-Extensions"), "no extension negotiated")
			assert.Equal(t, "welcome", readFrame(t, ws)["type"])
			send(t, ws, `{"type":"ping"}`)
			readUntil(t, ws, `{"type":"pong"}`)

			for i, rsv := range []byte{0x40, 0x20, 0x10} { // RSV1 (permessage-deflate's), RSV2, RSV3
				c, br := s.upgradeRaw(t, fmt.Sprintf("rsv-%d", i))
				assert.Contains(t, string(serverFrameOf(t, c, br, opText)), `"type":"welcome"`)
				write(t, c, transport.ClientFrame(fin|rsv|opText, appPing, true))
				assert.Equal(t, websocket.CloseProtocolError, closeCode(t, serverFrameOf(t, c, br, opClose)))
				ended(t, c, br)
			}
		})
	}
}

// wrappedListener hands out connections that are not *net.TCPConn, as a
// listener wrapped for TLS or accounting does: they cannot be polled.
type wrappedListener struct{ net.Listener }

type wrappedConn struct{ net.Conn }

func (l wrappedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return wrappedConn{c}, nil
}

// startWrapped serves a Hub for cfg behind a wrapped listener.
func startWrapped(t *testing.T, cfg transport.Config) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	hub, err := transport.NewManual(cfg)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(hub)
	srv.Config.ReadHeaderTimeout = waitLong
	srv.Listener = wrappedListener{srv.Listener}
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		assert.NoError(t, hub.Shutdown(ctx))
		srv.Close()
	})
	return &testServer{hub: hub, srv: srv, reg: reg, addr: srv.Listener.Addr().String()}
}

// presenced_connections_by_mode says how each live connection is read, over
// real listeners: a plain one gives polled connections (where the system
// has epoll), a wrapped one parked ones, as does ParkReaders.
func TestConnectionsByMode(t *testing.T) {
	polled := map[string]string{"mode": "polled"}
	parked := map[string]string{"mode": "parked"}
	cases := []struct {
		name   string
		start  func(t *testing.T) *testServer
		polled bool
	}{
		{"plain listener", func(t *testing.T) *testServer { return startServer(t, testConfig()) }, pollable},
		{"wrapped listener", func(t *testing.T) *testServer { return startWrapped(t, testConfig()) }, false},
		{"ParkReaders", func(t *testing.T) *testServer {
			cfg := testConfig()
			cfg.ParkReaders = true
			return startServer(t, cfg)
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			want, other := parked, polled
			if tc.polled {
				want, other = polled, parked
			}
			ws1, _ := s.dial(t, "alice")
			ws2, _ := s.dial(t, "bob")
			send(t, ws1, `{"type":"ping"}`)
			readUntil(t, ws1, `{"type":"pong"}`)
			s.waitMetric(t, "presenced_connections_by_mode", want, 2)
			assert.Zero(t, metric(t, s.reg, "presenced_connections_by_mode", other))
			ws1.Close()
			s.waitMetric(t, "presenced_connections_by_mode", want, 1)
			ws2.Close()
			s.waitMetric(t, "presenced_connections_by_mode", want, 0)
		})
	}
}

// Many clients sending frames over the limit at once, and then not hanging
// up, cost no thread each: the polled reader drains their sockets on the
// poller's wakes, not in a blocking wait. Each still gets its 1009 intact,
// is drained while it sends on, and is closed when it hangs up or, if it
// stays, at CloseTimeout.
func TestOversizeDrainHoldsNoThreads(t *testing.T) {
	if !pollable {
		t.Skip("no poller on this system")
	}
	const n = 150
	cfg := testConfig()
	cfg.CloseTimeout = 3 * time.Second
	s := startServer(t, cfg)
	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	clients := make([]client, n)
	for i := range clients {
		c, br := s.upgradeRaw(t, fmt.Sprintf("big-%d", i))
		assert.Contains(t, string(serverFrameOf(t, c, br, opText)), `"type":"welcome"`)
		clients[i] = client{c, br}
	}
	threads := pprof.Lookup("threadcreate")
	before := threads.Count()
	header := clientFrame(fin|opText, make([]byte, 1<<20))[:4096] // far over any watch frame
	for _, cl := range clients {
		write(t, cl.c, header)
	}
	for i, cl := range clients {
		assert.Equal(t, websocket.CloseMessageTooBig, closeCode(t, serverFrameOf(t, cl.c, cl.br, opClose)))
		// More of the frame, drained. Errors are not the test's: on a machine
		// stalled past CloseTimeout the server may have closed already.
		_, _ = cl.c.Write(make([]byte, 8192))
		if i%2 == 0 {
			_ = cl.c.(*net.TCPConn).CloseWrite()
		}
	}
	for _, cl := range clients {
		ended(t, cl.c, cl.br) // hung up, or at CloseTimeout
	}
	created := threads.Count() - before
	t.Logf("%d threads created while %d connections were drained", created, n)
	assert.Less(t, created, n/5, "a thread per drained connection")
	s.waitMetric(t, "presenced_closes_total", map[string]string{"reason": "too_big"}, n)
	s.waitMetric(t, "presenced_connections", nil, 0)
}
