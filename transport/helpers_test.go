package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// waitLong bounds every wait for an event; tests normally see it in a few
// ticks, this is only a safety net against hanging.
const waitLong = 5 * time.Second

type testServer struct {
	hub *transport.Hub
	srv *httptest.Server
	reg *prometheus.Registry
}

// slowConfig has a timeout (3 s) long enough that no test client idles out
// while a functional test runs.
func slowConfig() transport.Config {
	return transport.Config{Slots: 31, Tick: 100 * time.Millisecond}
}

// fastConfig has a 200 ms timeout and a 50 ms tick, for timing tests: a
// ping goes out 100-150 ms after the last frame, so its pong has at least
// 50 ms, a lot on loopback, even under -race on a busy machine.
func fastConfig() transport.Config {
	return transport.Config{Slots: 5, Tick: 50 * time.Millisecond, CloseTimeout: 200 * time.Millisecond}
}

func startServer(t *testing.T, cfg transport.Config) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	if cfg.Registerer == nil {
		cfg.Registerer = reg
	}
	hub, err := transport.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(hub)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		require.NoError(t, hub.Shutdown(ctx))
		srv.Close()
	})
	return &testServer{hub: hub, srv: srv, reg: reg}
}

func (s *testServer) wsURL(query string) string {
	return "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/ws?" + query
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
	ws, resp, err := websocket.DefaultDialer.Dial(s.wsURL(query), header)
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { ws.Close() })
	return ws
}

// dialStatus attempts an upgrade that must fail and returns the HTTP status.
func (s *testServer) dialStatus(t *testing.T, query string, header http.Header) int {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(s.wsURL(query), header)
	if ws != nil {
		ws.Close()
	}
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	resp.Body.Close()
	return resp.StatusCode
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
		got := readRaw(t, ws)
		if got == want {
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

// watcher reads a connection continuously, answering pings as a browser
// does, so it stays online however long a test waits, and hands over its
// text frames in order.
type watcher struct {
	frames chan string
	done   chan error
}

func watch(ws *websocket.Conn) *watcher {
	w := &watcher{frames: make(chan string, 1024), done: make(chan error, 1)}
	go func() {
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				w.done <- err
				close(w.frames)
				return
			}
			w.frames <- string(data)
		}
	}()
	return w
}

func (w *watcher) next(t *testing.T) string {
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
func (w *watcher) until(t *testing.T, want string) {
	t.Helper()
	for w.next(t) != want {
	}
}
