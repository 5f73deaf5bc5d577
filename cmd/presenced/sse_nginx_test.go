package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/nginxtest"
	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/internal/ssetest"
)

const sseWait = 20 * time.Second

// Through a proxy that knows nothing of WebSockets (nginx with a plain
// proxy_pass), the upgrade fails and Server-Sent Events work: the stream,
// presence, chat between two users, and the idle close.
func TestSSEThroughNginx(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	// nginx sends the upstream's name as Host: the name -hosts is for.
	node := presencedtest.Start(t, presencedtest.Build(t), "-hosts", nginxtest.Upstream, "-tick", "100ms", "-slots", "21") // a 2 s timeout
	proxy := nginxtest.Start(t, node.Addr)

	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+proxy.Addr+"/ws?uid=alice", nil)
	if ws != nil {
		ws.Close()
	}
	require.Error(t, err, "a WebSocket opened through a proxy that drops the upgrade")
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusUpgradeRequired, resp.StatusCode, "presenced saw a plain GET")

	alice, err := ssetest.Open(proxy.URL, "uid=alice&channels=lobby", nil)
	require.NoError(t, err)
	defer alice.Close()
	stopAlice := keepPosting(t, alice)
	defer stopAlice()
	require.NoError(t, alice.Until(`{"type":"joined","channel":"lobby","count":1,"members":["alice"]}`, sseWait))
	bob, err := ssetest.Open(proxy.URL, "uid=bob&channels=lobby", nil)
	require.NoError(t, err)
	defer bob.Close()
	require.NoError(t, alice.Until(`{"type":"presence","channel":"lobby","count":2,"joins":["bob"],"leaves":[]}`, sseWait))
	status, body, err := bob.Post("", `{"type":"chat","channel":"lobby","text":"through nginx"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, status, body)
	require.NoError(t, alice.Until(`{"type":"chat","channel":"lobby","from":"bob","text":"through nginx"}`, sseWait))

	// bob sends nothing more: closed as silent, while alice's pings keep
	// her stream.
	last, err := bob.Ended(sseWait)
	require.NoError(t, err)
	assert.Equal(t, `{"type":"close","code":4408,"reason":"idle timeout"}`, last)
	require.NoError(t, alice.Until(`{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["bob"]}`, sseWait))
	status, body, err = bob.Post("", `{"type":"ping"}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, status, body)
}

// Two nodes on one Redis behind one round-robin upstream: the POSTs of a
// stream land on both nodes, and each is answered as the holding node
// answers it; users on either node chat.
func TestSSEThroughNginxOnTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	redisURL := startRedisServer(t)
	bin := presencedtest.Build(t)
	a := presencedtest.Start(t, bin, "-hosts", nginxtest.Upstream, "-redis", redisURL, "-node", "a")
	b := presencedtest.Start(t, bin, "-hosts", nginxtest.Upstream, "-redis", redisURL, "-node", "b")
	proxy := nginxtest.Start(t, a.Addr, b.Addr)

	alice, err := ssetest.Open(proxy.URL, "uid=alice&channels=lobby", nil)
	require.NoError(t, err)
	defer alice.Close()
	bob, err := ssetest.Open(proxy.URL, "uid=bob&channels=lobby", nil)
	require.NoError(t, err)
	defer bob.Close()
	for i := range 6 {
		status, body, err := alice.Post("", `{"type":"ping"}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, status, "POST %d: %s", i, body)
		require.NoError(t, alice.Until(`{"type":"pong"}`, sseWait))
	}
	text := `{"type":"chat","channel":"lobby","text":"from one node or the other"}`
	for range 2 {
		status, body, err := bob.Post("", text)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, status, body)
		require.NoError(t, alice.Until(`{"type":"chat","channel":"lobby","from":"bob","text":"from one node or the other"}`, sseWait))
	}
	status, body, err := ssetest.Post(proxy.URL, alice.Session[:strings.LastIndexByte(alice.Session, '.')+1]+strings.Repeat("A", 22), `{"type":"ping"}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, status, body)

	posts := map[string]int{}
	for _, line := range proxy.Requests() {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "POST" && f[2] == "204" {
			posts[f[3]]++
		}
	}
	assert.Len(t, posts, 2, "the POSTs landed on both nodes: %v", proxy.Requests())
}

// keepPosting pings s's session every 300 ms, so that its stream outlives
// a short timeout, until the returned stop.
func keepPosting(t *testing.T, s *ssetest.Stream) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				if status, body, err := s.Post("", `{"type":"ping"}`); err != nil || status != http.StatusNoContent {
					t.Errorf("keepalive POST: %d %s %v", status, body, err)
					return
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// startRedisServer runs a redis-server of the test's own on a free loopback
// port and returns its URL.
func startRedisServer(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not found and CI is set: %v", err)
		}
		t.Skip("redis-server not found; install it (apt-get install redis-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--loglevel", "warning")
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	return "redis://" + addr
}
