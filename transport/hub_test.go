package transport_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

func TestPingPong(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dial(t, "alice")
	send(t, ws, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, readRaw(t, ws))
}

func TestOversizeFrameClosesWith1009(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMessage = 100
	s := startServer(t, cfg)
	ws, _ := s.dial(t, "alice")

	send(t, ws, `{"type":"join","channel":"c"}`)
	readUntil(t, ws, `{"type":"joined","channel":"c","count":1,"members":["alice"]}`)
	fits := `{"type":"chat","channel":"c","text":"` + strings.Repeat("x", 100-len(`{"type":"chat","channel":"c","text":""}`)) + `"}`
	require.Len(t, fits, 100)
	send(t, ws, fits)
	assert.Contains(t, readRaw(t, ws), `"type":"chat"`, "a frame of exactly MaxMessage is fine")

	send(t, ws, fits+" ")
	ce := readClose(t, ws)
	assert.Equal(t, websocket.CloseMessageTooBig, ce.Code)
	require.Eventually(t, func() bool { return !s.user(t, "alice").Online }, waitLong, 10*time.Millisecond)
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "too_big"}))
}

func TestDefaultMaxMessageIs4096(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dial(t, "alice")
	require.NoError(t, ws.WriteMessage(websocket.BinaryMessage, make([]byte, 4096)))
	send(t, ws, `{"type":"ping"}`)
	assert.Equal(t, `{"type":"pong"}`, readRaw(t, ws))
	require.NoError(t, ws.WriteMessage(websocket.BinaryMessage, make([]byte, 4097)))
	assert.Equal(t, websocket.CloseMessageTooBig, readClose(t, ws).Code)
}

// A client that never answers pings and sends nothing is closed with 4408
// between the timeout and the timeout plus one tick after its last frame,
// then its TCP connection is closed. The ring runs from the wall clock here:
// this is the one transport test of timing precision. The bounds it asserts
// allow for a loaded machine; the measured figure is logged.
func TestIdleCloseTiming(t *testing.T) {
	cfg := transport.Config{Slots: 11, Tick: 100 * time.Millisecond, CloseTimeout: 200 * time.Millisecond}
	s := startServerWith(t, cfg, serverOptions{clock: true})
	timeout := time.Duration(cfg.Slots-1) * cfg.Tick
	start := time.Now() // before the server's touch at the upgrade
	ws := s.dialRaw(t, "uid=idler", nil)
	dialed := time.Since(start)
	var pings atomic.Int32
	ws.SetPingHandler(func(string) error { pings.Add(1); return nil }) // a dead client: no pong
	require.Equal(t, "welcome", readFrame(t, ws)["type"])

	ce := readClose(t, ws)
	elapsed := time.Since(start)
	assert.Equal(t, protocol.CloseIdleTimeout, ce.Code)
	assert.Equal(t, "idle timeout", ce.Text)
	// One ping at half the timeout, before the close; none if a starved ring
	// caught up both steps at once, as the close drops what is queued.
	assert.LessOrEqual(t, pings.Load(), int32(1))
	// A touch counts from the last step taken, so steps that a starved
	// goroutine runs late and then catches up shorten the silence by their
	// delay, and a busy machine delays the close frame: the bounds are loose,
	// the precision is in the log (and exact, in steps, in tracker's tests).
	assert.GreaterOrEqual(t, elapsed, timeout/2, "never long before the timeout")
	assert.Less(t, elapsed, timeout+cfg.Tick+dialed+5*time.Second, "within one tick after the timeout, on an idle machine")
	t.Logf("closed %v after the dial started (timeout %v, tick %v, dial %v): %v past the timeout; %d ping",
		elapsed, timeout, cfg.Tick, dialed, elapsed-timeout, pings.Load())

	// After the close frame the server drops TCP: a raw read sees EOF/reset.
	nc := ws.NetConn()
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(waitLong)))
	_, err := nc.Read(make([]byte, 64))
	require.Error(t, err)
	var ne net.Error
	assert.False(t, errors.As(err, &ne) && ne.Timeout(), "the server closed the connection: %v", err)
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "idle"}))
}

// pingStep is the step after a connection's last frame at which the server
// pings it: half the 30-step timeout of testConfig, plus one.
const pingStep = 16

// A client that only answers server pings, like a background browser tab,
// stays online for several timeouts.
func TestPongOnlyClientStaysOnline(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dial(t, "tab")
	w := listen(ws) // answers pings, as a browser does
	for round := 1; round <= 6; round++ {
		s.step(pingStep)
		// The pong touched the connection before it was counted.
		s.waitMetric(t, "presenced_keepalives_total", map[string]string{"kind": "pong"}, float64(round))
	}
	assert.True(t, s.user(t, "tab").Online, "online after %d steps, %d timeouts", 6*pingStep, 6*pingStep/30)
	select {
	case <-w.done:
		t.Fatal("the connection was closed")
	default:
	}
}

// Every inbound frame kind is a keepalive: a client that never answers
// pings but sends one of them every 10 steps stays online for 4 timeouts.
func TestEveryFrameKindIsAKeepalive(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(*websocket.Conn) error
	}{
		{"text", func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`))
		}},
		{"binary", func(ws *websocket.Conn) error { return ws.WriteMessage(websocket.BinaryMessage, []byte{1}) }},
		{"ping", func(ws *websocket.Conn) error {
			return ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(waitLong))
		}},
		{"pong", func(ws *websocket.Conn) error {
			return ws.WriteControl(websocket.PongMessage, nil, time.Now().Add(waitLong))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, testConfig())
			ws, _ := s.dial(t, "u")
			ws.SetPingHandler(func(string) error { return nil })
			w := listen(ws)
			for i := 1; i <= 12; i++ {
				require.NoError(t, tc.send(ws))
				s.waitMetric(t, "presenced_keepalives_total", map[string]string{"kind": tc.name}, float64(i))
				s.step(10)
			}
			assert.True(t, s.user(t, "u").Online)
			select {
			case err := <-w.done:
				t.Fatalf("closed while sending %s keepalives: %v", tc.name, err)
			default:
			}
		})
	}
}

// After {"type":"silence"} a connection's control frames are no longer
// keepalives, so a client that only pings is closed one timeout after its
// last data frame; its next data frame makes them count again.
func TestSilenceStopsControlFramesCounting(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dial(t, "quiet")
	w := listen(ws)
	send(t, ws, `{"type":"silence"}`)
	for range 30 {
		w.sync(t) // a ping round trip: open, and not a keepalive now
		s.step(1)
	}
	s.step(1)
	var ce *websocket.CloseError
	require.ErrorAs(t, w.closed(t), &ce)
	assert.Equal(t, protocol.CloseIdleTimeout, ce.Code, "closed at the 31st step after the silence")

	ws2, _ := s.dial(t, "quiet")
	w2 := listen(ws2)
	send(t, ws2, `{"type":"silence"}`)
	send(t, ws2, `{"type":"ping"}`)
	w2.until(t, `{"type":"pong"}`)
	for range 3 * 31 {
		w2.sync(t)
		s.step(1)
	}
	assert.True(t, s.user(t, "quiet").Online, "pings count again after a data frame")
}

// An old connection that closes after a new one opened never takes the user
// offline, nor out of a channel, however the closes and opens of many tabs
// interleave.
func TestReconnectNeverFlapsOffline(t *testing.T) {
	s := startServer(t, testConfig())
	w := s.observer(t, "lobby", "alice")
	first, _ := s.dialIn(t, "alice", "lobby")
	s.step(1)
	w.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":["alice"],"leaves":[]}`)
	w.until(t, `{"type":"status","online":["alice"],"offline":[]}`)

	var wg sync.WaitGroup
	var last []*websocket.Conn
	var mu sync.Mutex
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			old := first
			if g > 0 {
				old, _ = s.dialIn(t, "alice", "lobby")
			}
			for i := range 15 {
				fresh, _ := s.dialIn(t, "alice", "lobby")
				old.Close()
				old = fresh
				if i%3 == 0 {
					s.hub.Step() // ticks fall among the reconnects, 20 in all: nobody idles out
				}
			}
			mu.Lock()
			last = append(last, old)
			mu.Unlock()
		}()
	}
	wg.Wait()
	w.sync(t)
	require.Eventually(t, func() bool { return s.user(t, "alice").Connections == 4 }, waitLong, 5*time.Millisecond)
	s.step(1)
	send(t, last[0], `{"type":"chat","channel":"lobby","text":"end"}`)
	for {
		f := w.next(t)
		require.NotContains(t, f, `"status"`, "alice never went offline")
		require.NotContains(t, f, `"presence"`, "alice never left the lobby")
		if strings.Contains(f, `"text":"end"`) {
			break
		}
	}
}

func TestGracePeriodDebouncesOffline(t *testing.T) {
	cfg := testConfig()
	cfg.Grace = 3 * cfg.Tick // offline at the 4th step after the last close
	s := startServer(t, cfg)
	w := s.observer(t, "lobby", "alice")
	a, _ := s.dialIn(t, "alice", "lobby")
	s.step(1)
	w.until(t, `{"type":"status","online":["alice"],"offline":[]}`)

	a.Close()
	s.waitMetric(t, "presenced_connections", nil, 1)
	s.step(3)
	assert.True(t, s.user(t, "alice").Online, "online during the grace period")
	a, _ = s.dialIn(t, "alice", "lobby") // a page reload
	s.step(5)
	send(t, a, `{"type":"chat","channel":"lobby","text":"back"}`)
	for {
		f := w.next(t)
		require.NotContains(t, f, `"status"`, "no edge across a reload within the grace period")
		require.NotContains(t, f, `"leaves":["alice"]`, "still in the lobby across the reload")
		if strings.Contains(f, `"back"`) {
			break
		}
	}

	a.Close()
	s.waitMetric(t, "presenced_connections", nil, 1)
	s.step(3)
	assert.True(t, s.user(t, "alice").Online, "online for the whole grace period")
	s.step(1)
	w.until(t, `{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}`)
	w.until(t, `{"type":"status","online":[],"offline":["alice"]}`)
}

func TestHeartbeatIsAConnectionForOneTimeout(t *testing.T) {
	s := startServer(t, testConfig())
	w := s.observer(t, "lobby", "hb")
	assert.Equal(t, http.StatusNoContent, s.heartbeat(t, "uid=hb&channels=lobby", nil))
	s.step(1)
	w.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":["hb"],"leaves":[]}`)
	w.until(t, `{"type":"status","online":["hb"],"offline":[]}`)
	assert.Equal(t, userPresence{UID: "hb", Online: true, Connections: 1}, s.user(t, "hb"))

	// Heartbeats within the timeout keep it online; a socket adds to it.
	hb, _ := s.dial(t, "hb")
	assert.Equal(t, 2, s.user(t, "hb").Connections)
	hb.Close()
	s.waitMetric(t, "presenced_connections", nil, 1)
	for range 6 {
		w.sync(t) // the observer's own keepalive
		s.step(10)
		require.Equal(t, http.StatusNoContent, s.heartbeat(t, "uid=hb&channels=lobby", nil))
	}
	assert.Equal(t, userPresence{UID: "hb", Online: true, Connections: 1}, s.user(t, "hb"))

	s.step(20)
	w.sync(t)
	s.step(10)
	assert.True(t, s.user(t, "hb").Online, "online for 30 steps after the last heartbeat")
	s.step(1)
	w.until(t, `{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["hb"]}`)
	w.until(t, `{"type":"status","online":[],"offline":["hb"]}`)
}

func TestHeartbeatRequests(t *testing.T) {
	s := startServer(t, testConfig())
	for _, tc := range []struct {
		name   string
		method string
		query  string
		want   int
	}{
		{"ok", http.MethodPost, "uid=a", http.StatusNoContent},
		{"bad uid", http.MethodPost, "uid=a%20b", http.StatusBadRequest},
		{"no uid", http.MethodPost, "", http.StatusBadRequest},
		{"GET", http.MethodGet, "uid=a", http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, s.srv.URL+"/api/heartbeat?"+tc.query, nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, tc.want, resp.StatusCode)
		})
	}
}

func TestPresenceAPI(t *testing.T) {
	s := startServer(t, testConfig())
	for _, uid := range []string{"carol", "alice", "bob"} {
		s.dial(t, uid)
	}
	type list struct {
		Count int      `json:"count"`
		Users []string `json:"users"`
	}
	for _, tc := range []struct {
		query string
		code  int
		want  list
	}{
		{"", 200, list{3, []string{"alice", "bob", "carol"}}},
		{"?limit=2", 200, list{3, []string{"alice", "bob"}}},
		{"?limit=0", 200, list{3, []string{}}},
		{"?limit=1000", 200, list{3, []string{"alice", "bob", "carol"}}},
		{"?limit=1001", 400, list{}},
		{"?limit=-1", 400, list{}},
		{"?limit=x", 400, list{}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var got list
			assert.Equal(t, tc.code, s.getJSON(t, "/api/presence"+tc.query, &got))
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Equal(t, userPresence{UID: "bob", Online: true, Connections: 1}, s.user(t, "bob"))
	assert.Equal(t, userPresence{UID: "dave"}, s.user(t, "dave"))
	assert.Equal(t, http.StatusBadRequest, s.getJSON(t, "/api/presence/a!b", nil))
}

func TestRingAPI(t *testing.T) {
	s := startServer(t, testConfig())
	s.dial(t, "a")
	s.dial(t, "b")
	s.step(3)
	var ring struct {
		Slots  int   `json:"slots"`
		TickMS int   `json:"tick_ms"`
		Cursor *int  `json:"cursor"`
		Due    []int `json:"due"`
	}
	require.Equal(t, http.StatusOK, s.getJSON(t, "/api/ring", &ring))
	assert.Equal(t, 31, ring.Slots)
	assert.Equal(t, 100, ring.TickMS)
	require.NotNil(t, ring.Cursor)
	assert.Equal(t, 3, *ring.Cursor)
	want := make([]int, 31)
	want[30] = 2 // touched before the first step: due at the 31st, in the slot behind cursor 0
	assert.Equal(t, want, ring.Due, "one key per connection")
}

type unhealthyEngine struct{ presence.Engine }

func (unhealthyEngine) Health(context.Context) error { return errTest }

var errTest = errorString("redis: connection refused")

type errorString string

func (e errorString) Error() string { return string(e) }

func TestHealthAndReadiness(t *testing.T) {
	s := startServer(t, testConfig())
	var body map[string]string
	assert.Equal(t, http.StatusOK, s.getJSON(t, "/healthz", &body))
	assert.Equal(t, "ok", body["status"])
	assert.Equal(t, http.StatusOK, s.getJSON(t, "/readyz", &body))

	cfg := testConfig()
	cfg.Engine = unhealthyEngine{presence.NewMemoryEngine()}
	bad := startServer(t, cfg)
	assert.Equal(t, http.StatusOK, bad.getJSON(t, "/healthz", nil), "alive, though not ready")
	code, reason := bad.getError(t, "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, reason, "redis: connection refused")
}

func TestShutdownClosesWith1001(t *testing.T) {
	hub, err := transport.NewManual(testConfig())
	require.NoError(t, err)
	srv := httptest.NewServer(hub)
	defer srv.Close()
	s := &testServer{hub: hub, srv: srv, addr: srv.Listener.Addr().String()}
	a, _ := s.dial(t, "alice")
	b, _ := s.dial(t, "bob")
	require.Equal(t, http.StatusNoContent, s.heartbeat(t, "uid=carol", nil))

	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- hub.Shutdown(ctx) }()
	for _, ws := range []*websocket.Conn{a, b} {
		ce := readClose(t, ws)
		assert.Equal(t, websocket.CloseGoingAway, ce.Code)
	}
	require.NoError(t, <-done)
	assert.Equal(t, http.StatusServiceUnavailable, s.dialStatus(t, "uid=late", nil))
	assert.Equal(t, http.StatusServiceUnavailable, s.heartbeat(t, "uid=late", nil))
	var p struct{ Count int }
	s.getJSON(t, "/api/presence", &p)
	assert.Equal(t, 0, p.Count, "every user of this node is reported offline")
	assert.NoError(t, hub.Shutdown(ctx), "idempotent")
}

func TestShutdownGivesUpWhenContextEnds(t *testing.T) {
	cfg := testConfig()
	cfg.CloseTimeout = time.Hour // only the context can end the wait
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	hub, err := transport.NewManual(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(hub)
	defer srv.Close()
	s := &testServer{hub: hub, srv: srv, reg: reg, addr: srv.Listener.Addr().String()}
	s.dialRaw(t, "uid=stubborn", nil) // never reads: never answers the close
	s.waitMetric(t, "presenced_connections", nil, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = hub.Shutdown(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, metric(t, reg, "presenced_connections", nil), "the socket is dropped when the context ends")
}

func TestDemoModeRejectsBadUIDs(t *testing.T) {
	s := startServer(t, testConfig())
	for _, tc := range []struct {
		uid  string
		want int
	}{
		{"", http.StatusBadRequest},
		{"a%20b", http.StatusBadRequest},
		{"%C3%A9", http.StatusBadRequest},
		{strings.Repeat("x", 65), http.StatusBadRequest},
		{"a/b", http.StatusBadRequest},
	} {
		assert.Equal(t, tc.want, s.dialStatus(t, "uid="+tc.uid, nil), "uid %q", tc.uid)
	}
	ws := s.dialRaw(t, "uid="+strings.Repeat("x", 64), nil)
	assert.Equal(t, "welcome", readFrame(t, ws)["type"])
	ws = s.dialRaw(t, "uid=Al_ice.B-0@x", nil)
	assert.Equal(t, "welcome", readFrame(t, ws)["type"])
}

func TestOriginCheck(t *testing.T) {
	cfg := testConfig()
	cfg.Origins = []string{"https://app.example.com", "trusted.test:8443"}
	s := startServer(t, cfg)
	host := strings.TrimPrefix(s.srv.URL, "http://")
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true}, // not a browser
		{"http://" + host, true},
		{"https://app.example.com", true},
		{"HTTPS://APP.EXAMPLE.COM", true},
		{"http://app.example.com", false},
		{"https://trusted.test:8443", true},
		{"https://evil.test", false},
		{"null", false},
	} {
		h := http.Header{}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		if tc.ok {
			ws := s.dialRaw(t, "uid=o", h)
			assert.Equal(t, "welcome", readFrame(t, ws)["type"], tc.origin)
		} else {
			assert.Equal(t, http.StatusForbidden, s.dialStatus(t, "uid=o", h), tc.origin)
			assert.Equal(t, http.StatusForbidden, s.heartbeat(t, "uid=o", h), tc.origin)
		}
	}
}

// A client that stops reading is closed as a slow consumer; the others keep
// receiving every frame, never blocked by it.
func TestSlowConsumerIsClosedOthersUnaffected(t *testing.T) {
	cfg := testConfig()
	cfg.QueueBytes = 256 << 10
	cfg.ByteRate, cfg.FrameRate = 64<<20, 1e4 // the fast client sends 200 frames, 12 MB, as fast as it can
	// Long enough that the slow client is closed because its queue fills, not
	// because a write to it timed out first on a busy machine: the frames
	// that did not fit are the ones counted as dropped.
	cfg.WriteTimeout = waitLong
	cfg.MaxMessage = 64 << 10
	s := startServer(t, cfg)
	fast, _ := s.dialIn(t, "fast", "lobby")
	s.dialRaw(t, "uid=slow&channels=lobby", nil) // never reads
	s.waitMetric(t, "presenced_connections", nil, 2)

	text := strings.Repeat("x", 60<<10)
	w := listen(fast)
	for i := 0; i < 200; i++ {
		send(t, fast, `{"type":"chat","channel":"lobby","text":"`+text+`"}`)
		// Lockstep, so only the reader that stops falls behind.
		for !strings.Contains(w.next(t), `"type":"chat"`) {
		}
	}
	require.Eventually(t, func() bool { return !s.user(t, "slow").Online }, waitLong, 10*time.Millisecond)
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "slow"}))
	assert.Positive(t, metric(t, s.reg, "presenced_events_dropped_total", nil))
}

func TestMetricsAreRegistered(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dialIn(t, "alice", "lobby")
	send(t, ws, `{"type":"chat","channel":"lobby","text":"x"}`)
	readUntil(t, ws, `{"type":"chat","channel":"lobby","from":"alice","text":"x"}`)
	require.Equal(t, http.StatusNoContent, s.heartbeat(t, "uid=bob", nil))
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_connections", nil))
	assert.Equal(t, 2.0, metric(t, s.reg, "presenced_users_online", nil))
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_keepalives_total", map[string]string{"kind": "text"}))
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_keepalives_total", map[string]string{"kind": "heartbeat"}))
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_chat_messages_total", nil))
	assert.Equal(t, 0.0, metric(t, s.reg, "presenced_events_dropped_total", nil))
	assert.Equal(t, 0.1, metric(t, s.reg, "presenced_ring_tick_seconds", nil), "testConfig's tick")
	s.step(1)
	require.Eventually(t, func() bool {
		families, err := s.reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == "presenced_ring_step_seconds" {
				return f.GetMetric()[0].GetHistogram().GetSampleCount() > 0
			}
		}
		return false
	}, waitLong, 10*time.Millisecond)

	// The same registry cannot take a second Hub's metrics.
	cfg := testConfig()
	cfg.Registerer = s.reg
	_, err := transport.New(cfg)
	assert.Error(t, err)
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []transport.Config{
		{Slots: 1},
		{Tick: -time.Second},
		{Grace: -1},
		{MaxMessage: -1},
		{MemberList: -1},
		{Origins: []string{"https://"}},
		{Origins: []string{"app.example.com/path"}},
	} {
		_, err := transport.New(cfg)
		assert.Error(t, err, "%+v", cfg)
	}
}

// Many users connecting and leaving at once settle at zero.
func TestConcurrentChurn(t *testing.T) {
	s := startServer(t, testConfig())
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				ws, _ := s.dialIn(t, []string{"a", "b", "c"}[j%3], "lobby")
				send(t, ws, `{"type":"chat","channel":"lobby","text":"x"}`)
				ws.Close()
			}
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		var p struct{ Count int }
		s.getJSON(t, "/api/presence", &p)
		return p.Count == 0 && metric(t, s.reg, "presenced_connections", nil) == 0
	}, waitLong, 10*time.Millisecond)
}
