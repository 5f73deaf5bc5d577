package transport_test

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
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/apicheck"
	"github.com/presenced/presenced/transport"
)

// waitLong bounds every wait for something that must happen. Tests normally
// see it at once; the bound only keeps a broken test from hanging, so it is
// generous enough for -race on a machine whose cores are all busy.
const waitLong = 20 * time.Second

type testServer struct {
	hub  *transport.Hub
	srv  *httptest.Server
	reg  *prometheus.Registry
	addr string // 127.0.0.1:port
}

// testConfig has a 30-step timeout. Under startServer the ring steps only
// when the test calls step, so no client idles out while a test runs,
// however busy the machine.
func testConfig() transport.Config {
	return transport.Config{Slots: 31, Tick: 100 * time.Millisecond}
}

// serverOptions are how a test server differs from the usual one.
type serverOptions struct {
	// clock steps the ring from the wall clock, as in production; without
	// it only step moves time.
	clock bool
	// headerTimeout is the http.Server's ReadHeaderTimeout, as
	// cmd/presenced sets one; 0 means waitLong.
	headerTimeout time.Duration
	// sendBuffer > 0 fixes the socket send buffer of every accepted
	// connection (else loopback autotuning grows it to megabytes and hides a
	// client that stops reading).
	sendBuffer int
	// handover, if set, replaces the 2 s a chat may wait for the engine.
	handover time.Duration
	// timeouts, if set, is the http.Server's ReadTimeout and WriteTimeout,
	// as cmd/presenced sets them.
	timeouts time.Duration
}

// startServer serves a Hub for cfg on loopback whose ring steps only when
// the test calls step.
func startServer(t *testing.T, cfg transport.Config) *testServer {
	return startServerWith(t, cfg, serverOptions{})
}

func startServerWith(t *testing.T, cfg transport.Config, opts serverOptions) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	if cfg.Registerer == nil {
		cfg.Registerer = reg
	}
	newHub := transport.NewManual
	if opts.clock {
		newHub = transport.New
	}
	if opts.handover > 0 {
		newHub = func(cfg transport.Config) (*transport.Hub, error) {
			return transport.NewManualHandover(cfg, opts.handover)
		}
	}
	hub, err := newHub(cfg)
	require.NoError(t, err)
	// Checked against docs/openapi.yaml in the handler, not the listener:
	// a wrapped net.Conn would keep the Hub from polling its sockets.
	var checks []apicheck.Option
	if _, own := cfg.Auth.(transport.AuthenticatorFunc); own {
		checks = append(checks, apicheck.OwnAuth)
	}
	srv := httptest.NewUnstartedServer(apicheck.Handler(t, hub, checks...))
	srv.Config.ReadHeaderTimeout = cmp(opts.headerTimeout, waitLong)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = opts.timeouts, opts.timeouts
	if opts.sendBuffer > 0 {
		srv.Listener = smallSendBuffers{srv.Listener, opts.sendBuffer}
	}
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		assert.NoError(t, hub.Shutdown(ctx))
		srv.Close()
	})
	return &testServer{hub: hub, srv: srv, reg: reg, addr: srv.Listener.Addr().String()}
}

func cmp[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

type smallSendBuffers struct {
	net.Listener
	size int
}

func (l smallSendBuffers) Accept() (net.Conn, error) {
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

// step moves the ring n steps, as n ticks of the clock would.
func (s *testServer) step(n int) {
	for range n {
		s.hub.Step()
	}
}

func (s *testServer) wsURL(query string) string {
	return "ws://" + s.addr + "/ws?" + query
}

// dialer dials clients; rcvBuf > 0 shrinks the client's socket receive
// buffer, so a client that stops reading backs up into the server quickly.
func dialer(rcvBuf int) *websocket.Dialer {
	nd := &net.Dialer{Timeout: waitLong}
	if rcvBuf > 0 {
		// Before connect, so the window offered in the handshake is small too.
		nd.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = setRcvBuf(fd, rcvBuf)
			})
			return errors.Join(err, serr)
		}
	}
	return &websocket.Dialer{HandshakeTimeout: waitLong, NetDialContext: nd.DialContext}
}

// connect opens a WebSocket as uid with d, joined to channels, and reads its
// welcome and joined frames. It returns an error rather than failing, so
// goroutines may call it. The server has registered the connection when it
// returns: the welcome comes after that.
func (s *testServer) connect(d *websocket.Dialer, uid string, channels ...string) (*websocket.Conn, error) {
	q := url.Values{"uid": {uid}}
	if len(channels) > 0 {
		q.Set("channels", strings.Join(channels, ","))
	}
	ws, resp, err := d.Dial(s.wsURL(q.Encode()), nil)
	if resp != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", uid, err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(waitLong))
	var m struct{ Type, Channel string }
	if err := ws.ReadJSON(&m); err != nil || m.Type != "welcome" {
		ws.Close()
		return nil, fmt.Errorf("%s: want a welcome first, got %q, err %v", uid, m.Type, err)
	}
	// The snapshots come in order; what others send to a channel already
	// joined may come between them.
	for _, want := range channels {
		for m.Type != "joined" || m.Channel != want {
			if err := ws.ReadJSON(&m); err != nil {
				ws.Close()
				return nil, fmt.Errorf("%s: want joined %s: %w", uid, want, err)
			}
		}
	}
	_ = ws.SetReadDeadline(time.Time{})
	return ws, nil
}

// dialIn opens a WebSocket as uid joined to channels, and returns it after
// reading the welcome and the joined snapshots, which it returns too.
func (s *testServer) dialIn(t *testing.T, uid string, channels ...string) (*websocket.Conn, []string) {
	t.Helper()
	ws := s.dialRaw(t, url.Values{"uid": {uid}, "channels": {strings.Join(channels, ",")}}.Encode(), nil)
	require.Equal(t, "welcome", readFrame(t, ws)["type"], "first frame")
	var snapshots []string
	for range channels {
		snapshots = append(snapshots, readRaw(t, ws))
	}
	return ws, snapshots
}

// dial opens a WebSocket as uid (demo auth) and returns it after reading the
// welcome frame, which it returns too.
func (s *testServer) dial(t *testing.T, uid string) (*websocket.Conn, map[string]any) {
	t.Helper()
	ws := s.dialRaw(t, "uid="+url.QueryEscape(uid), nil)
	welcome := readFrame(t, ws)
	require.Equal(t, "welcome", welcome["type"], "first frame")
	return ws, welcome
}

func (s *testServer) dialRaw(t *testing.T, query string, header http.Header) *websocket.Conn {
	t.Helper()
	ws, resp, err := dialer(0).Dial(s.wsURL(query), header)
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { ws.Close() })
	return ws
}

// dialStatus attempts an upgrade that must fail and returns the HTTP status.
func (s *testServer) dialStatus(t *testing.T, query string, header http.Header) int {
	t.Helper()
	ws, resp, err := dialer(0).Dial(s.wsURL(query), header)
	if ws != nil {
		ws.Close()
	}
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	resp.Body.Close()
	return resp.StatusCode
}

// observer connects a user "observer" that joins channel and watches uids,
// none of them online yet, and listens.
func (s *testServer) observer(t *testing.T, channel string, uids ...string) *listener {
	t.Helper()
	ws, _ := s.dialIn(t, "observer", channel)
	w := listen(ws)
	list, err := json.Marshal(uids)
	require.NoError(t, err)
	send(t, ws, `{"type":"watch","uids":`+string(list)+`}`)
	w.until(t, `{"type":"watching","online":[]}`)
	return w
}

// upgradeRaw performs the WebSocket handshake by hand on a raw TCP
// connection, so the test can then write bytes no client library would.
func (s *testServer) upgradeRaw(t *testing.T, uid string) (net.Conn, *bufio.Reader) {
	t.Helper()
	return s.upgradeQuery(t, "uid="+uid)
}

// upgradeQuery is upgradeRaw with the query string of the URL.
func (s *testServer) upgradeQuery(t *testing.T, query string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.addr, waitLong)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	fmt.Fprintf(c, "GET /ws?%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", query, s.addr, base64.StdEncoding.EncodeToString(key))
	br := bufio.NewReader(c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLong)))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	return c, br
}

// ended fails unless the server closes c: it reads (and discards) until EOF
// or a reset, failing on a timeout.
func ended(t *testing.T, c net.Conn, r io.Reader) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLong)))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "server did not close the connection")
}

// alive checks the server still serves a fresh client: welcome, then a pong
// for a ping.
func (s *testServer) alive(t *testing.T, uid string) {
	t.Helper()
	ws, err := s.connect(dialer(0), uid)
	require.NoError(t, err)
	defer ws.Close()
	send(t, ws, `{"type":"ping"}`)
	readUntil(t, ws, `{"type":"pong"}`)
}

func readRaw(t *testing.T, ws *websocket.Conn) string {
	t.Helper()
	require.NoError(t, ws.SetReadDeadline(time.Now().Add(waitLong)))
	mt, data, err := ws.ReadMessage()
	require.NoError(t, err)
	require.Equal(t, websocket.TextMessage, mt)
	return string(data)
}

func readFrame(t *testing.T, ws *websocket.Conn) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(readRaw(t, ws)), &m))
	return m
}

// readUntil reads frames until one equals want (compact JSON), skipping
// others, e.g. presence changes of other tests' users.
func readUntil(t *testing.T, ws *websocket.Conn, want string) {
	t.Helper()
	for {
		if withoutLastSeen(readRaw(t, ws)) == want {
			return
		}
	}
}

// readClose reads until the server's close frame and returns it.
func readClose(t *testing.T, ws *websocket.Conn) *websocket.CloseError {
	t.Helper()
	require.NoError(t, ws.SetReadDeadline(time.Now().Add(waitLong)))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		return ce
	}
}

func send(t *testing.T, ws *websocket.Conn, frame string) {
	t.Helper()
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(frame)))
}

func (s *testServer) getJSON(t *testing.T, path string, v any) int {
	t.Helper()
	resp, err := http.Get(s.srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	}
	return resp.StatusCode
}

// getError makes a request that must be refused and returns its status and
// the error of its JSON body.
func (s *testServer) getError(t *testing.T, path string) (int, string) {
	t.Helper()
	return s.do(t, http.MethodGet, path, nil, "")
}

// do makes a request with an optional JSON body and Authorization header,
// and returns its status and, for a refusal, the error of its JSON body.
func (s *testServer) do(t *testing.T, method, path string, body any, authorization string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, ok := body.(string)
		if !ok {
			raw, err := json.Marshal(body)
			require.NoError(t, err)
			b = string(raw)
		}
		rd = strings.NewReader(b)
	}
	req, err := http.NewRequest(method, s.srv.URL+path, rd)
	require.NoError(t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode < 400 {
		return resp.StatusCode, ""
	}
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%s %s: a refusal is JSON", method, path)
	var e struct{ Error string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.NotEmpty(t, e.Error)
	return resp.StatusCode, e.Error
}

type userPresence struct {
	UID         string `json:"uid"`
	Online      bool   `json:"online"`
	Connections int    `json:"connections"`
}

func (s *testServer) user(t *testing.T, uid string) userPresence {
	t.Helper()
	var p userPresence
	require.Equal(t, http.StatusOK, s.getJSON(t, "/api/presence/"+uid, &p))
	return p
}

// onlineCount is how many users the server reports online.
func (s *testServer) onlineCount(t *testing.T) int {
	t.Helper()
	var p struct{ Count int }
	require.Equal(t, http.StatusOK, s.getJSON(t, "/api/presence?limit=0", &p))
	return p.Count
}

func (s *testServer) heartbeat(t *testing.T, query string, header http.Header) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/api/heartbeat?"+query, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// metric returns the value of a counter or gauge in reg, 0 if absent.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// waitMetric waits until a counter or gauge reaches want.
func (s *testServer) waitMetric(t *testing.T, name string, labels map[string]string, want float64) {
	t.Helper()
	require.Eventually(t, func() bool { return metric(t, s.reg, name, labels) == want }, waitLong, time.Millisecond,
		"%s%v: want %v, have %v", name, labels, want, metric(t, s.reg, name, labels))
}

// listener reads a connection continuously, answering pings as a browser
// does, and hands over its text frames in order.
type listener struct {
	ws     *websocket.Conn
	frames chan string
	done   chan error
	pongs  chan string
	seq    atomic.Int64
}

func listen(ws *websocket.Conn) *listener {
	w := &listener{ws: ws, frames: make(chan string, 1024), done: make(chan error, 1), pongs: make(chan string, 16)}
	// The listener waits with deadlines of its own (next, sync): a read
	// deadline left by the reads before it would end a long test early.
	_ = ws.SetReadDeadline(time.Time{})
	ws.SetPongHandler(func(data string) error {
		select {
		case w.pongs <- data:
		default:
		}
		return nil
	})
	go func() {
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				w.done <- err
				close(w.frames)
				return
			}
			w.frames <- withoutLastSeen(string(data))
		}
	}()
	return w
}

var lastSeenField = regexp.MustCompile(`,"last_seen":\{[^}]*\}`)

// withoutLastSeen drops a status frame's last-seen times, which are wall
// clock: the tests that compare whole frames check the rest, and
// TestStatusFramesSayWhenLastSeen checks them.
func withoutLastSeen(frame string) string {
	return lastSeenField.ReplaceAllString(frame, "")
}

func (w *listener) next(t *testing.T) string {
	t.Helper()
	select {
	case f, ok := <-w.frames:
		if !ok {
			require.FailNow(t, "connection closed", "%v", <-w.done)
		}
		return f
	case <-time.After(waitLong):
		require.FailNow(t, "no frame")
		return ""
	}
}

// until skips frames until one equals want.
func (w *listener) until(t *testing.T, want string) {
	t.Helper()
	for w.next(t) != want {
	}
}

// sync makes a round trip with a WebSocket ping, so the server has handled
// every frame this client sent before it (the server reads a connection in
// order). The ping is itself a keepalive.
func (w *listener) sync(t *testing.T) {
	t.Helper()
	require.True(t, w.syncOrClosed(t), "connection closed")
}

// syncOrClosed is sync, or false if the connection closes first.
func (w *listener) syncOrClosed(t *testing.T) bool {
	t.Helper()
	id := strconv.FormatInt(w.seq.Add(1), 10)
	if err := w.ws.WriteControl(websocket.PingMessage, []byte(id), time.Now().Add(waitLong)); err != nil {
		return false
	}
	timeout := time.After(waitLong)
	for {
		select {
		case p := <-w.pongs:
			if p == id {
				return true
			}
		case err := <-w.done:
			w.done <- err // for closed
			return false
		case <-timeout:
			require.FailNow(t, "no pong")
			return false
		}
	}
}

// closed returns the error that ended the connection, failing if it is
// still open after waitLong.
func (w *listener) closed(t *testing.T) error {
	t.Helper()
	for {
		select {
		case _, ok := <-w.frames:
			if !ok {
				return <-w.done
			}
		case <-time.After(waitLong):
			require.FailNow(t, "connection still open")
		}
	}
}

// stepEvery steps the ring every d until the returned stop is called, for
// tests that wait on the idle timeout or a grace period among other things.
func (s *testServer) stepEvery(d time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tk := time.NewTicker(d)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				s.hub.Step()
			}
		}
	}()
	return func() { close(done); <-stopped }
}
