package cluster

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
)

// startPresenced runs a real cmd/presenced sharing presence through the
// Redis at redisAddr.
func startPresenced(t *testing.T, bin, redisAddr, node string, slots int, tick time.Duration) *presencedtest.Process {
	t.Helper()
	return presencedtest.Start(t, bin, "-redis", "redis://"+redisAddr+"/0", "-node", node,
		"-slots", strconv.Itoa(slots), "-tick", tick.String())
}

// wsClient is one WebSocket client that keeps itself alive with pings and
// collects the frames it receives.
type wsClient struct {
	ws     *websocket.Conn
	frames chan frame
	stop   chan struct{}
}

func connect(t *testing.T, addr, uid string, every time.Duration) *wsClient {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid="+uid, nil)
	require.NoError(t, err)
	resp.Body.Close()
	c := &wsClient{ws: ws, frames: make(chan frame, 256), stop: make(chan struct{})}
	go func() {
		defer close(c.frames)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var f frame
			if json.Unmarshal(data, &f) == nil {
				c.frames <- f
			}
		}
	}()
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tick.C:
				if ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)) != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(c.stop)
		ws.Close()
	})
	return c
}

// await reads frames until match, or fails at the deadline.
func (c *wsClient) await(t *testing.T, within time.Duration, what string, match func(frame) bool) (frame, []frame) {
	t.Helper()
	var seen []frame
	deadline := time.After(within)
	for {
		select {
		case f, ok := <-c.frames:
			require.True(t, ok, "connection closed while waiting for %s", what)
			seen = append(seen, f)
			if match(f) {
				return f, seen
			}
		case <-deadline:
			t.Fatalf("no %s within %v; got %+v", what, within, seen)
		}
	}
}

// Real presenced processes on one Redis: a node is SIGKILLed. Its user with a
// tab on another node stays online; its user only there goes offline on the
// surviving nodes within about one timeout, exactly once. Then a node stopped
// with SIGTERM takes its users offline at once.
func TestSIGKILLedPresencedNode(t *testing.T) {
	srv := startRedis(t)
	const slots, tick = 11, 200 * time.Millisecond // a 2 s timeout: real processes on a shared machine
	timeout := (slots - 1) * tick
	bin := presencedtest.Build(t)
	n1 := startPresenced(t, bin, srv.addr(), "n1", slots, tick)
	n2 := startPresenced(t, bin, srv.addr(), "n2", slots, tick)
	n3 := startPresenced(t, bin, srv.addr(), "n3", slots, tick)
	eve := connect(t, n3.Addr, "eve", timeout/4)
	eve.await(t, 5*time.Second, "eve's welcome", func(f frame) bool { return f.Type == "welcome" })

	bob := connect(t, n2.Addr, "bob", timeout/4)
	bob.await(t, 5*time.Second, "bob's welcome", func(f frame) bool { return f.Type == "welcome" })
	connect(t, n1.Addr, "alice", timeout/4)
	connect(t, n2.Addr, "alice", timeout/4)
	connect(t, n1.Addr, "carol", timeout/4)
	bob.await(t, 5*time.Second, "alice online", presence("alice", true))
	bob.await(t, 5*time.Second, "carol online", presence("carol", true))

	require.NoError(t, n1.Signal(syscall.SIGKILL))
	n1.Wait()
	killed := time.Now()
	_, seen := bob.await(t, 3*timeout, "carol offline", presence("carol", false))
	took := time.Since(killed)
	t.Logf("SIGKILL to offline on the other node: %v (timeout %v)", took, timeout)
	// About one timeout (lease expiry plus a claim round); the slack absorbs
	// three processes and Redis under -race on a 2-core machine.
	assert.Less(t, took, 2*timeout, "offline within about one timeout")

	// A while longer: no second offline for carol, none at all for alice.
	more := time.After(timeout)
	for done := false; !done; {
		select {
		case f := <-bob.frames:
			seen = append(seen, f)
		case <-more:
			done = true
		}
	}
	carol, alice := 0, 0
	for _, f := range seen {
		if presence("carol", false)(f) {
			carol++
		}
		if presence("alice", false)(f) {
			alice++
		}
	}
	assert.Equal(t, 1, carol, "carol's offline frames")
	assert.Equal(t, 0, alice, "alice has a tab on n2")

	resp, err := http.Get("http://" + n2.Addr + "/api/presence/alice")
	require.NoError(t, err)
	defer resp.Body.Close()
	var u struct {
		Online      bool `json:"online"`
		Connections int  `json:"connections"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&u))
	assert.True(t, u.Online)
	assert.Equal(t, 1, u.Connections)

	metrics, err := http.Get("http://" + n2.Addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(body), "presenced_cluster_redis_up 1")

	// A graceful stop (SIGTERM) drops n2's leases at once: well before a
	// lease could expire, eve on n3 sees alice and bob go offline.
	stopped := time.Now()
	require.NoError(t, n2.Signal(syscall.SIGTERM))
	_, seenA := eve.await(t, 3*timeout, "bob offline", presence("bob", false))
	_, seenB := eve.await(t, 3*timeout, "alice offline", presence("alice", false))
	took = time.Since(stopped)
	carol = 0
	for _, f := range append(seenA, seenB...) {
		if presence("carol", false)(f) {
			carol++
		}
	}
	assert.Equal(t, 1, carol, "carol's offline frames on n3")
	t.Logf("SIGTERM to offline on another node: %v", took)
	assert.Less(t, took, timeout/2)
	assert.Equal(t, 0, n2.Wait())
}
