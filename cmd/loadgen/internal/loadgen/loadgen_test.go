package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

const workerEnv = "LOADGEN_TEST_WORKER"

// TestMain lets the test binary serve as a worker process, so the
// multi-process path runs for real.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		job, err := ReadJob(os.Stdin)
		if err != nil {
			os.Exit(2)
		}
		if err := RunWorker(context.Background(), job.Spec, job.Workers, os.Stdout, nil); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// idleServer is a small real server with presenced's idle semantics: any
// inbound frame is a keepalive, pings go out at a third of the timeout, and
// silence past the timeout ends with close 4408. closeLive, when set, makes it
// close that uid with 4408 right after the welcome, as a buggy server would.
type idleServer struct {
	timeout   time.Duration
	closeLive string
	appPings  atomic.Int64
	conns     atomic.Int64

	mu       sync.Mutex
	channels map[string]string // uid -> its ?channels= at connect
}

func (s *idleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	up := websocket.Upgrader{}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.conns.Add(1)
	var wmu sync.Mutex
	write := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return ws.WriteMessage(websocket.TextMessage, b)
	}
	uid := r.URL.Query().Get("uid")
	if r.URL.Query().Has("channels") {
		s.mu.Lock()
		if s.channels == nil {
			s.channels = map[string]string{}
		}
		s.channels[uid] = r.URL.Query().Get("channels")
		s.mu.Unlock()
	}
	_ = write(protocol.MustEncode(protocol.Welcome{UID: uid, TimeoutMS: s.timeout.Milliseconds()}).Data)
	if uid == s.closeLive {
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(protocol.CloseIdleTimeout, protocol.ReasonIdleTimeout), time.Now().Add(time.Second))
		_ = ws.Close()
		return
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(s.timeout / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
			}
		}
	}()
	defer close(done)
	extend := func() { _ = ws.SetReadDeadline(time.Now().Add(s.timeout)) }
	extend()
	ws.SetPongHandler(func(string) error { extend(); return nil })
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(protocol.CloseIdleTimeout, protocol.ReasonIdleTimeout), time.Now().Add(time.Second))
			}
			_ = ws.Close()
			return
		}
		extend()
		if f, err := protocol.ParseClient(msg); err == nil && f == (protocol.Ping{}) {
			s.appPings.Add(1)
			_ = write(protocol.MustEncode(protocol.Pong{}).Data)
		}
	}
}

func startIdleServer(t *testing.T, s *idleServer) string {
	t.Helper()
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws"
}

// inProcess runs workers as goroutines connected through pipes.
func inProcess(ctx context.Context, spec Spec, workers int) (io.ReadCloser, func() error, error) {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := RunWorker(ctx, spec, workers, pw, nil)
		_ = pw.CloseWithError(err)
		errc <- err
	}()
	return pr, func() error { return <-errc }, nil
}

func TestRunDetectsSilentClientsAndNoFalseCloses(t *testing.T) {
	t.Parallel()
	// A 1 s timeout: live clients outlive a late ping on a loaded machine.
	srv := &idleServer{timeout: time.Second}
	url := startIdleServer(t, srv)
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: url, Conns: 60, Silent: 12, Ramp: 300 * time.Millisecond,
		Linger: 50 * time.Millisecond, Duration: 3 * time.Second, Workers: 3, Every: 100 * time.Millisecond,
		ServerPID: os.Getpid(),
	})
	require.NoError(t, err)
	assert.True(t, sum.OK(), "%+v", sum)
	assert.Equal(t, 60, sum.Conns)
	assert.EqualValues(t, 60, sum.Connected)
	assert.Zero(t, sum.FailedDials)
	assert.Equal(t, 12, sum.Silent)
	assert.Equal(t, 12, sum.SilentClosed)
	assert.Zero(t, sum.FalseClosed)
	assert.Zero(t, sum.SilentUnclosed)
	assert.EqualValues(t, 1000, sum.TimeoutMS)
	assert.Equal(t, 3, sum.Workers)
	// Detection is measured from the last frame sent, so it is at least the
	// server's read deadline (less rounding); how much later is the machine's
	// business, and every silent client was closed within the run.
	t.Logf("detection p50 %v ms, p99 %v ms, max %v ms (timeout 1000 ms)", sum.DetectP50MS, sum.DetectP99MS, sum.DetectMaxMS)
	assert.GreaterOrEqual(t, sum.DetectP50MS, 990.0)
	assert.LessOrEqual(t, sum.DetectP50MS, sum.DetectP99MS)
	assert.LessOrEqual(t, sum.DetectP99MS, sum.DetectMaxMS)
	assert.Equal(t, map[string]int{"4408": 12}, sum.CloseCodes)
	// 48 live clients pinging every 100 ms for over 2.5 s; a loaded machine
	// may drop ticks, so only a third of them is required.
	assert.Greater(t, srv.appPings.Load(), int64(48*8))
	assert.Greater(t, sum.Keepalives, int64(48*8))
	assert.Positive(t, sum.HoldMS)
	assert.Positive(t, sum.HoldKeepalives)
	// Every frame the server sent was read and counted by type.
	assert.EqualValues(t, 60, sum.FrameTypes["welcome"])
	// A pong still in flight when the run closes its clients is not read:
	// at most a few per live client.
	assert.LessOrEqual(t, sum.FrameTypes["pong"], srv.appPings.Load())
	assert.GreaterOrEqual(t, sum.FrameTypes["pong"], srv.appPings.Load()-3*48)
	assert.Equal(t, sum.FramesReceived, sum.FrameTypes["welcome"]+sum.FrameTypes["pong"], "%v", sum.FrameTypes)
	assert.Equal(t, 60, sum.FramesPerClient.Clients)
	assert.GreaterOrEqual(t, sum.FramesPerClient.Min, int64(1))
	assert.LessOrEqual(t, sum.FramesPerClient.P50, sum.FramesPerClient.Max)
	require.Len(t, sum.ServerRSSHoldKB, 2)
	assert.Positive(t, sum.ServerRSSHoldKB[0])
}

func TestRunJoinsRoomsAndTheBigChannelAtConnect(t *testing.T) {
	t.Parallel()
	srv := &idleServer{timeout: 5 * time.Second}
	url := startIdleServer(t, srv)
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: url, Conns: 23, Room: 5, BigChannel: "lobby", BigEvery: 4, Workers: 3,
		Ramp: 100 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	assert.True(t, sum.OK(), "%+v", sum)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Len(t, srv.channels, 23)
	rooms := map[string]int{}
	big := 0
	for uid, chans := range srv.channels {
		var i int
		_, err := fmt.Sscanf(uid, "lg%d", &i)
		require.NoError(t, err)
		want := fmt.Sprintf("room-%d", i/5)
		if i%4 == 0 {
			want += ",lobby"
			big++
		}
		assert.Equal(t, want, chans, uid)
		rooms[strings.Split(chans, ",")[0]]++
	}
	assert.Equal(t, map[string]int{"room-0": 5, "room-1": 5, "room-2": 5, "room-3": 5, "room-4": 3}, rooms)
	assert.Equal(t, 6, big) // 0, 4, ..., 20
}

func TestRunWithoutChannelsSendsNone(t *testing.T) {
	t.Parallel()
	srv := &idleServer{timeout: 5 * time.Second}
	url := startIdleServer(t, srv)
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: url, Conns: 4, Ramp: 50 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	assert.EqualValues(t, 4, srv.conns.Load())
	assert.EqualValues(t, 4, sum.Connected)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	assert.Empty(t, srv.channels)
}

func TestSpecChannels(t *testing.T) {
	s := Spec{}
	assert.Empty(t, s.channels(7))
	s.Room = 50
	assert.Equal(t, []string{"room-0"}, s.channels(49))
	assert.Equal(t, []string{"room-1"}, s.channels(50))
	s.BigChannel, s.BigEvery = "all", 10
	assert.Equal(t, []string{"room-2", "all"}, s.channels(120))
	assert.Equal(t, []string{"room-2"}, s.channels(121))
	s.Room = 0
	assert.Equal(t, []string{"all"}, s.channels(0))
	assert.Empty(t, s.channels(3))
}

func TestFrameType(t *testing.T) {
	cases := []struct {
		msg  string
		want string
		ok   bool
	}{
		{`{"type":"presence","channel":"room-1","count":3,"joins":["a"]}`, "presence", true},
		{`{"channel":"room-1","count":3,"type":"joined"}`, "joined", true},
		{`{"data":{"type":"inner"},"type":"publish"}`, "publish", true},
		{`{"type":"we\"ird"}`, `we"ird`, true},
		{` {"type": "pong"}`, "pong", true},
		{`{"count":1}`, "", false},
		{`not json`, "", false},
	}
	for _, tc := range cases {
		got, ok := frameType([]byte(tc.msg))
		assert.Equal(t, tc.ok, ok, tc.msg)
		assert.Equal(t, tc.want, got, tc.msg)
	}
	tc := newTypeCounters()
	tc.add("presence")
	tc.add("presence")
	tc.add("something-new")
	assert.Equal(t, map[string]int64{"presence": 2, "other": 1}, tc.snapshot())
}

func TestFrameStats(t *testing.T) {
	assert.Equal(t, FrameStats{}, frameStats(nil))
	got := frameStats([]int64{3, 1, 2, 10})
	assert.Equal(t, FrameStats{Clients: 4, Min: 1, P50: 2, P99: 10, Max: 10, Mean: 4}, got)
}

func TestRunCountsAClosedLiveClientAsFalseClose(t *testing.T) {
	t.Parallel()
	// A timeout far past the run: only the buggy close can end a client.
	srv := &idleServer{timeout: 30 * time.Second, closeLive: "lg7"}
	url := startIdleServer(t, srv)
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: url, Conns: 10, Ramp: 100 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 600 * time.Millisecond,
	})
	require.NoError(t, err)
	assert.Equal(t, 1, sum.FalseClosed)
	assert.Equal(t, map[string]int{"4408": 1}, sum.CloseCodes)
	assert.Nil(t, sum.ServerRSSHoldKB, "no server pid, no samples")
	assert.False(t, sum.OK())
}

func TestRunReportsSilentClientsLeftOpen(t *testing.T) {
	t.Parallel()
	// The timeout is far longer than the run: nobody is closed.
	srv := &idleServer{timeout: 30 * time.Second}
	url := startIdleServer(t, srv)
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: url, Conns: 8, Silent: 3, Ramp: 100 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	assert.Equal(t, 3, sum.Silent)
	assert.Equal(t, 3, sum.SilentUnclosed)
	assert.False(t, sum.OK())
}

func TestRunCountsFailedDials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: "ws" + strings.TrimPrefix(srv.URL, "http"), Conns: 5, Ramp: 50 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	assert.EqualValues(t, 5, sum.FailedDials)
	assert.Zero(t, sum.Connected)
}

func TestRunInWorkerProcesses(t *testing.T) {
	t.Parallel()
	// A 1 s timeout: live clients outlive a late ping on a loaded machine.
	srv := &idleServer{timeout: time.Second}
	url := startIdleServer(t, srv)
	self, err := os.Executable()
	require.NoError(t, err)
	var progress presencedtest.SyncBuffer
	co := &Coordinator{Launch: ExecLauncher(self, nil, []string{workerEnv + "=1"}, os.Stderr), Progress: &progress}
	sum, err := co.Run(context.Background(), Config{
		URL: url, Conns: 40, Silent: 6, Ramp: 200 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 4 * time.Second, PerWorker: 15,
	})
	require.NoError(t, err)
	assert.Equal(t, 3, sum.Workers)
	assert.True(t, sum.OK(), "%+v", sum)
	assert.Equal(t, 6, sum.SilentClosed)
	assert.EqualValues(t, 40, srv.conns.Load())
	assert.Contains(t, progress.String(), "open=40")
}

func TestConfigRejects(t *testing.T) {
	ok := Config{URL: "ws://127.0.0.1:1/ws", Conns: 10, Ramp: time.Second, Linger: 50 * time.Millisecond, Duration: 2 * time.Second}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"remote host", func(c *Config) { c.URL = "ws://192.0.2.1:8080/ws" }, "not a loopback"},
		{"tls", func(c *Config) { c.URL = "wss://127.0.0.1:8080/ws" }, "scheme"},
		{"no conns", func(c *Config) { c.Conns = 0 }, "conns"},
		{"too many silent", func(c *Config) { c.Silent = 11 }, "silent"},
		{"duration inside ramp", func(c *Config) { c.Duration = c.Ramp }, "duration"},
		{"sources leave loopback", func(c *Config) {
			c.SourceFirst = netip.MustParseAddr("127.255.255.250")
			c.Sources = 10
		}, "127.0.0.0/8"},
		{"non-loopback source", func(c *Config) { c.SourceFirst = netip.MustParseAddr("10.0.0.1") }, "loopback"},
		{"negative room", func(c *Config) { c.Room = -1 }, "room"},
		{"big channel with a comma", func(c *Config) { c.BigChannel = "a,b" }, "big channel"},
		{"big channel named like a room", func(c *Config) { c.BigChannel = "room-0" }, "big channel"},
		{"big-every alone", func(c *Config) { c.BigEvery = 3 }, "big-every needs"},
		{"unknown transport", func(c *Config) { c.Transport = "poll" }, "transport"},
		{"sse on a ws url", func(c *Config) { c.Transport = TransportSSE }, "scheme must be http"},
		{"ws on an http url", func(c *Config) { c.URL = "http://127.0.0.1:1/sse" }, "scheme must be ws"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			_, err := c.withDefaults(context.Background())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	got, err := ok.withDefaults(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.2"}, got.sourceAddrs())
}

func TestConfigDefaultsSplitLargeRuns(t *testing.T) {
	c, err := Config{URL: "ws://localhost:8080/ws", Conns: 18000, Silent: 1001, Ramp: time.Second, Linger: 50 * time.Millisecond, Duration: 2 * time.Second}.withDefaults(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, c.Workers)
	assert.Equal(t, 3, c.Sources)
	assert.Equal(t, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}, c.sourceAddrs())

	specs := plan(c, time.Now())
	var conns, silent int
	seen := map[int]bool{}
	for _, s := range specs {
		conns += s.Conns
		silent += s.Silent
		for i := range s.Conns {
			g := s.globalIndex(i, len(specs))
			assert.False(t, seen[g], "client %d planned twice", g)
			seen[g] = true
		}
	}
	assert.Equal(t, 18000, conns)
	assert.Equal(t, 1001, silent)
	assert.Len(t, seen, 18000)
}

func TestSpecUID(t *testing.T) {
	s := Spec{UIDPrefix: "lg"}
	assert.Equal(t, "lg12345", s.uid(12345))
	s.Users = 100
	assert.Equal(t, "lg45", s.uid(12345))
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	cases := []struct {
		p    float64
		want float64
	}{{50, 5}, {99, 10}, {100, 10}, {0, 1}, {10, 1}, {11, 2}}
	for _, tc := range cases {
		assert.Equal(t, tc.want, percentile(xs, tc.p), "p%v", tc.p)
	}
	assert.Zero(t, percentile(nil, 99))
}

func TestSampleProc(t *testing.T) {
	s, err := sampleProc(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, s.RSSKB)
	_, err = sampleProc(1 << 30)
	assert.Error(t, err)
}

func TestRunAgainstPresencedHub(t *testing.T) {
	t.Parallel()
	// A 1 s timeout: a live client answers the hub's ping within half of it
	// even on a loaded machine.
	const tick = 100 * time.Millisecond
	url := startHub(t, transport.Config{Slots: 11, Tick: tick})
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: url, Conns: 80, Silent: 16, Users: 20,
		Ramp: 200 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 4 * time.Second, Workers: 2,
	})
	require.NoError(t, err)
	// Clients without app pings stay only by answering the hub's pings.
	assert.True(t, sum.OK(), "%+v", sum)
	assert.EqualValues(t, 1000, sum.TimeoutMS)
	assert.Equal(t, 16, sum.SilentClosed)
	assert.Positive(t, sum.ServerPings)
	// Between the timeout and timeout + tick after the last frame on a quiet
	// machine. A touch counts from the last step taken, so a late step
	// shortens the silence by its delay: the floor allows two ticks of it.
	t.Logf("detection p50 %v ms, max %v ms (timeout 1000 ms, tick %v)", sum.DetectP50MS, sum.DetectMaxMS, tick)
	assert.GreaterOrEqual(t, sum.DetectP50MS, float64((time.Second-2*tick)/time.Millisecond))
	assert.Less(t, sum.DetectMaxMS, float64((time.Second+tick+2*time.Second)/time.Millisecond))
}

func TestRunRoomsAgainstPresencedHub(t *testing.T) {
	t.Parallel()
	// A 1 s timeout: live clients answer the hub's ping within half of it
	// even on a loaded machine.
	const tick, run = 40 * time.Millisecond, 3 * time.Second
	url := startHub(t, transport.Config{Slots: 26, Tick: tick, PresenceLists: 15})
	co := &Coordinator{Launch: inProcess}
	// Four rooms of 10 and one channel of 20 (above PresenceLists: count-only diffs).
	sum, err := co.Run(context.Background(), Config{
		URL: url, Conns: 40, Silent: 8, Room: 10,
		BigChannel: "all", BigEvery: 2,
		Ramp: 200 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: run, Workers: 2,
	})
	require.NoError(t, err)
	assert.True(t, sum.OK(), "%+v", sum)
	assert.Equal(t, 8, sum.SilentClosed)
	// One welcome per client, one joined per channel joined at connect, and
	// per-tick diffs of those channels; nothing the clients could not parse
	// and no error frames (the server accepted every channel name).
	assert.EqualValues(t, 40, sum.FrameTypes["welcome"])
	assert.EqualValues(t, 40+20, sum.FrameTypes["joined"])
	assert.Positive(t, sum.FrameTypes["presence"])
	assert.Zero(t, sum.FrameTypes["error"])
	assert.Zero(t, sum.FrameTypes["invalid"])
	assert.Zero(t, sum.FrameTypes["other"])
	var byType int64
	for _, n := range sum.FrameTypes {
		byType += n
	}
	assert.Equal(t, sum.FramesReceived, byType)
	t.Logf("frames by type %v, per client %+v", sum.FrameTypes, sum.FramesPerClient)
	assert.Equal(t, 40, sum.FramesPerClient.Clients)
	// Joins and the silent clients' leaves arrive coalesced per tick: a
	// client gets at most one diff per channel per tick, not one per edge of
	// all 40 users.
	assert.GreaterOrEqual(t, sum.FramesPerClient.Min, int64(2))
	assert.Less(t, sum.FramesPerClient.Max, int64(2+2*run/tick+5))
}

// startHub serves a real presenced Hub for cfg on loopback and returns its
// WebSocket URL.
func startHub(t *testing.T, cfg transport.Config) string {
	t.Helper()
	hub, err := transport.New(cfg)
	require.NoError(t, err)
	hs := httptest.NewServer(hub)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, hub.Shutdown(ctx))
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws"
}

func TestRunSSEAgainstPresencedHub(t *testing.T) {
	t.Parallel()
	// A 1 s timeout and a ping every 200 ms: a live stream's POSTs keep it
	// even when a few of them are late on a loaded machine.
	const tick = 100 * time.Millisecond
	url := strings.Replace(startHub(t, transport.Config{Slots: 11, Tick: tick}), "ws://", "http://", 1)
	url = strings.TrimSuffix(url, "/ws") + "/sse"
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: url, Transport: TransportSSE, Conns: 40, Silent: 8, Room: 10, Every: 200 * time.Millisecond,
		Ramp: 200 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 4 * time.Second, Workers: 2,
	})
	require.NoError(t, err)
	assert.True(t, sum.OK(), "%+v", sum)
	assert.EqualValues(t, 40, sum.Connected)
	assert.EqualValues(t, 1000, sum.TimeoutMS)
	assert.Equal(t, 8, sum.SilentClosed)
	assert.Zero(t, sum.FalseClosed)
	assert.Equal(t, map[string]int{"4408": 8}, sum.CloseCodes)
	// A stream has no server pings: only the POSTs kept the live clients,
	// each answered on its stream.
	assert.Zero(t, sum.ServerPings)
	assert.Greater(t, sum.Keepalives, int64(32*5))
	assert.Positive(t, sum.HoldKeepalives)
	assert.EqualValues(t, 40, sum.FrameTypes["welcome"])
	assert.EqualValues(t, 40, sum.FrameTypes["joined"])
	assert.EqualValues(t, 8, sum.FrameTypes["close"])
	assert.LessOrEqual(t, sum.FrameTypes["pong"], sum.Keepalives)
	assert.Greater(t, sum.FrameTypes["pong"], int64(32*5))
	assert.Zero(t, sum.FrameTypes["invalid"])
	assert.Zero(t, sum.FrameTypes["error"])
	// As for a WebSocket: from the last POST written to the close event,
	// between the timeout (less two late ticks) and well past it.
	t.Logf("detection p50 %v ms, max %v ms (timeout 1000 ms, tick %v)", sum.DetectP50MS, sum.DetectMaxMS, tick)
	assert.GreaterOrEqual(t, sum.DetectP50MS, float64((time.Second-2*tick)/time.Millisecond))
	assert.Less(t, sum.DetectMaxMS, float64((time.Second+tick+2*time.Second)/time.Millisecond))
}

func TestRunSSECountsRefusedStreamsAsFailedDials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	co := &Coordinator{Launch: inProcess}
	sum, err := co.Run(context.Background(), Config{
		URL: srv.URL + "/sse", Transport: TransportSSE, Conns: 5,
		Ramp: 50 * time.Millisecond, Linger: 50 * time.Millisecond, Duration: 300 * time.Millisecond,
	})
	require.NoError(t, err)
	assert.EqualValues(t, 5, sum.FailedDials)
	assert.Zero(t, sum.Connected)
}
