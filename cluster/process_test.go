package cluster

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
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

// connect dials addr as uid, watching the users in watch, and pings every
// so often.
func connect(t *testing.T, addr, uid string, every time.Duration, watch ...string) *wsClient {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid="+uid, nil)
	require.NoError(t, err)
	resp.Body.Close()
	if len(watch) > 0 {
		list, err := json.Marshal(watch)
		require.NoError(t, err)
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"watch","uids":`+string(list)+`}`)))
	}
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

// connections polls a node until it reports want connections for uid, so a
// test acts only once the node has registered them.
func connections(t *testing.T, addr, uid string, want int) {
	t.Helper()
	var got int
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/api/presence/" + uid)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var u struct {
			Connections int `json:"connections"`
		}
		if json.NewDecoder(resp.Body).Decode(&u) != nil {
			return false
		}
		got = u.Connections
		return got == want
	}, processWait, 20*time.Millisecond, "%s's connections on %s: want %d", uid, addr, want)
}

// processWait bounds every wait on real processes: generous, since three
// presenced, Redis and the test share a loaded machine.
const processWait = 20 * time.Second

// Real presenced processes on one Redis: a node is SIGKILLed. Its user with a
// tab on another node stays online; its user only there goes offline on the
// surviving nodes once its lease expires, exactly once. Then a node stopped
// with SIGTERM drops its users' leases itself instead of letting them expire.
func TestSIGKILLedPresencedNode(t *testing.T) {
	srv := startRedis(t)
	// A 4 s timeout: a lease survives a renewal delayed by over 2 s on a
	// loaded machine, so no live user flickers.
	const slots, tick = 11, 400 * time.Millisecond
	timeout := (slots - 1) * tick
	bin := presencedtest.Build(t)
	n1 := startPresenced(t, bin, srv.addr(), "n1", slots, tick)
	n2 := startPresenced(t, bin, srv.addr(), "n2", slots, tick)
	n3 := startPresenced(t, bin, srv.addr(), "n3", slots, tick)
	eve := connect(t, n3.Addr, "eve", timeout/4, "alice", "bob", "carol")
	eve.await(t, processWait, "eve's watch list", func(f frame) bool { return f.Type == "watching" })

	bob := connect(t, n2.Addr, "bob", timeout/4, "alice", "carol")
	bob.await(t, processWait, "bob's watch list", func(f frame) bool { return f.Type == "watching" })
	connect(t, n1.Addr, "alice", timeout/4)
	connect(t, n2.Addr, "alice", timeout/4)
	connect(t, n1.Addr, "carol", timeout/4)
	// One status frame or two: edges within a tick are coalesced.
	seenOnline := map[string]bool{}
	bob.await(t, processWait, "alice and carol online", func(f frame) bool {
		for _, uid := range []string{"alice", "carol"} {
			seenOnline[uid] = seenOnline[uid] || status(uid, true)(f)
		}
		return seenOnline["alice"] && seenOnline["carol"]
	})
	// Both of alice's tabs must hold a lease before n1 dies.
	connections(t, n2.Addr, "alice", 2)

	require.NoError(t, n1.Signal(syscall.SIGKILL))
	n1.Wait()
	killed := time.Now()
	_, seen := bob.await(t, processWait, "carol offline", status("carol", false))
	t.Logf("SIGKILL to offline on the other node: %v (timeout %v)", time.Since(killed), timeout)

	// Two claim rounds more: a second offline for carol, or any for alice,
	// would show by then.
	more := time.After(timeout / 3)
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
		if status("carol", false)(f) {
			carol++
		}
		if status("alice", false)(f) {
			alice++
		}
	}
	assert.Equal(t, 1, carol, "carol's offline frames")
	assert.Equal(t, 0, alice, "alice has a tab on n2")
	connections(t, n2.Addr, "alice", 1)

	// A surviving node reaped n1's records: carol's offline was emitted
	// once, by n2 or n3, and alice's record on n1 went without an edge. The
	// reaper counts it when it handles the claim's reply, which may trail
	// the edge's delivery to bob.
	claimed := 0.0
	require.Eventually(t, func() bool {
		claimed = 0
		for _, n := range []*presencedtest.Process{n2, n3} {
			claimed += metricValue(scrape(t, n.Addr), "presenced_cluster_reaped_offline_total")
		}
		return claimed > 0
	}, processWait, 20*time.Millisecond, "n1's records reaped")
	assert.Equal(t, 1.0, claimed, "offline edges emitted by reaping n1")
	for _, n := range []*presencedtest.Process{n2, n3} {
		assert.Contains(t, scrape(t, n.Addr), "presenced_cluster_redis_up 1")
	}

	// A graceful stop (SIGTERM): n2 drops its leases itself, so the offline
	// edges are its own, not a claim after expiry: n3, the only node left to
	// claim them, reaps nothing more.
	reapedByN3 := metricValue(scrape(t, n3.Addr), "presenced_cluster_reaped_offline_total")
	stopped := time.Now()
	require.NoError(t, n2.Signal(syscall.SIGTERM))
	seenOffline := map[string]bool{}
	_, seenA := eve.await(t, processWait, "bob and alice offline", func(f frame) bool {
		for _, uid := range []string{"alice", "bob"} {
			seenOffline[uid] = seenOffline[uid] || status(uid, false)(f)
		}
		return seenOffline["alice"] && seenOffline["bob"]
	})
	t.Logf("SIGTERM to offline on another node: %v (timeout %v)", time.Since(stopped), timeout)
	carol = 0
	for _, f := range seenA {
		if status("carol", false)(f) {
			carol++
		}
	}
	assert.Equal(t, 1, carol, "carol's offline frames on n3")
	assert.Equal(t, 0, n2.Wait())
	assert.Equal(t, reapedByN3, metricValue(scrape(t, n3.Addr), "presenced_cluster_reaped_offline_total"),
		"n2 dropped its records itself: n3 reaped none of them")
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// metricValue reads an unlabelled sample from Prometheus text, 0 if absent.
func metricValue(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// Real presenced processes on a real 3-master Redis Cluster, through a
// redis+cluster:// URL: a watched user on one node is seen online from the
// other, and offline once its node is SIGKILLed.
func TestPresencedOnRedisCluster(t *testing.T) {
	rc := startRedisCluster(t)
	addrs := rc.addrs()
	url := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	const slots, tick = 11, 400 * time.Millisecond
	timeout := (slots - 1) * tick
	bin := presencedtest.Build(t)
	start := func(node string) *presencedtest.Process {
		return presencedtest.Start(t, bin, "-redis", url, "-node", node, "-slots", strconv.Itoa(slots), "-tick", tick.String())
	}
	n1, n2 := start("n1"), start("n2")
	bob := connect(t, n2.Addr, "bob", timeout/4, "carol")
	bob.await(t, processWait, "bob's watch list", func(f frame) bool { return f.Type == "watching" })
	connect(t, n1.Addr, "carol", timeout/4)
	bob.await(t, processWait, "carol online", status("carol", true))
	connections(t, n2.Addr, "carol", 1)

	require.NoError(t, n1.Signal(syscall.SIGKILL))
	n1.Wait()
	killed := time.Now()
	bob.await(t, processWait, "carol offline", status("carol", false))
	t.Logf("SIGKILL to offline on the other node, on a Redis Cluster: %v (timeout %v)", time.Since(killed), timeout)
	assert.Contains(t, scrape(t, n2.Addr), "presenced_cluster_redis_up 1")
}
