package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
)

const waitLong = 10 * time.Second

func TestParseFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want options
		err  bool
	}{
		{name: "defaults", want: options{addr: ":8080", slots: 31, tick: time.Second, maxMessage: 4096, memberList: 100, presenceLists: 1000}},
		{name: "all flags", args: []string{"-addr", "127.0.0.1:9", "-slots", "61", "-tick", "500ms", "-max-message", "100",
			"-origins", " https://a.example , b.example:8443,", "-jwt-secret", "s", "-grace", "2s", "-redis", "redis://x", "-node", "n1",
			"-member-list", "5", "-presence-lists", "50"},
			want: options{addr: "127.0.0.1:9", slots: 61, tick: 500 * time.Millisecond, maxMessage: 100,
				origins: []string{"https://a.example", "b.example:8443"}, jwtSecret: "s", grace: 2 * time.Second, redis: "redis://x", node: "n1",
				memberList: 5, presenceLists: 50}},
		{name: "secret from env", env: map[string]string{"PRESENCED_JWT_SECRET": "e"},
			want: options{addr: ":8080", slots: 31, tick: time.Second, maxMessage: 4096, jwtSecret: "e", memberList: 100, presenceLists: 1000}},
		{name: "flag beats env", args: []string{"-jwt-secret", "f"}, env: map[string]string{"PRESENCED_JWT_SECRET": "e"},
			want: options{addr: ":8080", slots: 31, tick: time.Second, maxMessage: 4096, jwtSecret: "f", memberList: 100, presenceLists: 1000}},
		{name: "bad duration", args: []string{"-tick", "soon"}, err: true},
		{name: "unknown flag", args: []string{"-verbose"}, err: true},
		{name: "stray argument", args: []string{"extra"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args, env(tc.env), io.Discard)
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startRun runs the server in-process on a free loopback port and returns
// its address; the server stops when the test ends.
func startRun(t *testing.T, args []string, env map[string]string) (string, *presencedtest.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &presencedtest.SyncBuffer{}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), func(k string) string { return env[k] }, out)
	}()
	t.Cleanup(func() {
		cancel()
		assert.Equal(t, 0, <-code, out.String())
	})
	var addr string
	require.Eventually(t, func() bool {
		m := listening.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, waitLong, 5*time.Millisecond, "no listening line: %s", out)
	return addr, out
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestServesPageAPIAndMetrics(t *testing.T) {
	// A 20 s timeout: alice never answers a ping, and must stay online
	// however slowly the checks run.
	addr, out := startRun(t, []string{"-slots", "11", "-tick", "2s"}, nil)
	assert.Contains(t, out.String(), "demo mode", "warns when running without authentication")
	base := "http://" + addr

	code, body := get(t, base+"/")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, strings.ToLower(body), "<html")

	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid=alice&channels=lobby", nil)
	require.NoError(t, err)
	defer ws.Close()
	_, welcome, err := ws.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, `{"type":"welcome","uid":"alice","timeout_ms":20000}`, string(welcome))
	_, joined, err := ws.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":1,"members":["alice"]}`, string(joined))

	for _, tc := range []struct{ path, want string }{
		{"/healthz", `"status":"ok"`},
		{"/api/presence", `{"count":1,"users":["alice"]}`},
		{"/api/presence/alice", `{"uid":"alice","online":true,"connections":1}`},
		{"/api/channels/lobby", `{"channel":"lobby","count":1,"members":["alice"]}`},
		{"/api/ring", `"slots":11,"tick_ms":2000`},
		{"/metrics", "presenced_connections 1"},
		{"/metrics", `presenced_frames_sent_total{type="joined"} 1`},
		{"/metrics", "go_goroutines"},
	} {
		code, body := get(t, base+tc.path)
		assert.Equal(t, http.StatusOK, code, tc.path)
		assert.Contains(t, body, tc.want, tc.path)
	}
}

func TestJWTSecretFromEnvironment(t *testing.T) {
	addr, out := startRun(t, nil, map[string]string{"PRESENCED_JWT_SECRET": "s3cret"})
	assert.NotContains(t, out.String(), "demo mode")
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid=alice", nil)
	require.Error(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("s3cret"))
	require.NoError(t, err)
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?token="+tok, nil)
	require.NoError(t, err)
	defer ws.Close()
	_, welcome, err := ws.ReadMessage()
	require.NoError(t, err)
	assert.Contains(t, string(welcome), `"uid":"bob"`)
}

func TestStartupErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad redis URL", []string{"-redis", "http://127.0.0.1:6379"}, 1, "-redis"},
		{"bad ring", []string{"-slots", "1"}, 1, "Slots"},
		{"bad flag", []string{"-tick", "x"}, 2, "invalid value"},
		{"bad address", []string{"-addr", "256.0.0.1:1"}, 1, "listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			assert.Equal(t, tc.code, run(context.Background(), tc.args, func(string) string { return "" }, &out))
			assert.Contains(t, out.String(), tc.want)
		})
	}
}

// TestSIGTERMClosesClientsWith1001 builds the real binary, runs it, and
// checks that SIGTERM reaches a connected client as close 1001 and that the
// process then exits 0.
func TestSIGTERMClosesClientsWith1001(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	// The default 30 s timeout: the clients read nothing until the close, so
	// they must not be dropped as idle first.
	p := presencedtest.Start(t, presencedtest.Build(t))
	addr := p.Addr

	var clients []*websocket.Conn
	for _, uid := range []string{"alice", "bob"} {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid="+uid, nil)
		require.NoError(t, err)
		defer ws.Close()
		_, _, err = ws.ReadMessage()
		require.NoError(t, err)
		clients = append(clients, ws)
	}
	require.NoError(t, p.Signal(syscall.SIGTERM))
	for _, ws := range clients {
		require.NoError(t, ws.SetReadDeadline(time.Now().Add(waitLong)))
		var err error
		for err == nil {
			_, _, err = ws.ReadMessage()
		}
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, websocket.CloseGoingAway, ce.Code)
	}
	exited := make(chan int, 1)
	go func() { exited <- p.Wait() }()
	select {
	case code := <-exited:
		assert.Equal(t, 0, code, "exit status 0")
	case <-time.After(waitLong):
		t.Fatal("the server did not exit after SIGTERM")
	}
}
