package transport_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/transport"
)

const memClientsEnv = "PRESENCED_MEMTEST_DIAL"

// The bounds on what an idle connection may cost (heap and stacks after
// GC, 1,000 connections), with headroom over what it costs today: 1.3 to
// 1.5 KB, 1.4 to 1.7 KB under -race. A parked reader goroutine alone would
// add 4 KB, net's socket state taken back about 0.3 KB, and gorilla's Conn
// kept by an idle connection 0.7 KB (2.2 KB were measured so).
const (
	maxBytesPerIdleConn     = 1900.0
	maxBytesPerIdleConnRace = 2300.0
)

// TestMemoryPerIdleConnection measures what an idle WebSocket costs the
// server: heap and goroutine stacks after a GC, divided by the connections.
// The clients live in a child process (this test binary), so their memory
// is not counted. PRESENCED_MEMTEST_N sets the number of connections (1,000);
// PRESENCED_MEMTEST_PROFILE names a file for a heap profile of every
// allocation still live, and the test then logs the runtime's memory
// classes per connection.
func TestMemoryPerIdleConnection(t *testing.T) {
	if addr := os.Getenv(memClientsEnv); addr != "" {
		runMemClients(t, addr)
		return
	}
	if testing.Short() || lockorder.Enabled {
		t.Skip("a measurement: skipped with -short, under -race and while checking the lock order")
	}
	n := 1000
	if s := os.Getenv("PRESENCED_MEMTEST_N"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err, "PRESENCED_MEMTEST_N")
	}
	profile := os.Getenv("PRESENCED_MEMTEST_PROFILE")
	if profile != "" {
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 1
	}
	// A 300 s timeout: the ring pings no client within the test, even when
	// a profile of the allocations slows the ramp down to minutes.
	hub, err := transport.New(transport.Config{Slots: 31, Tick: 10 * time.Second})
	require.NoError(t, err)
	srv := httptest.NewServer(hub)
	defer srv.Close()
	defer hub.Shutdown(t.Context())

	noWorkers(t)
	before := memInUse()
	classes := readMemClasses()
	goroutines := runtime.NumGoroutine()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryPerIdleConnection$")
	cmd.Env = append(os.Environ(), memClientsEnv+"="+strings.TrimPrefix(srv.URL, "http://"), "PRESENCED_MEMTEST_N="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "ready") {
	}
	require.Equal(t, n, onlineCount(t, srv.URL), "every client connected")
	http.DefaultClient.CloseIdleConnections() // onlineCount's connection and its goroutines
	noWorkers(t)
	// An idle connection holds no goroutine: those of the workers and of
	// onlineCount's HTTP connection are gone within a few seconds.
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= goroutines+2 }, waitLong, 50*time.Millisecond,
		"goroutines held by idle connections: %d more than before them", runtime.NumGoroutine()-goroutines)
	after := memInUse()
	perConn := float64(after-before) / float64(n)
	perGoroutine := float64(runtime.NumGoroutine()-goroutines) / float64(n)
	if profile != "" {
		logMemClasses(t, classes, readMemClasses(), n)
		f, err := os.Create(profile)
		require.NoError(t, err)
		require.NoError(t, pprof.Lookup("heap").WriteTo(f, 0))
		require.NoError(t, f.Close())
	}
	t.Logf("idle WebSocket: %.0f B of heap+stack per connection, %.2f goroutines per connection (%d connections)", perConn, perGoroutine, n)
	// The race detector makes every object and stack larger.
	bound := maxBytesPerIdleConn
	if raceEnabled {
		bound = maxBytesPerIdleConnRace
	}
	assert.Less(t, perConn, bound, "bytes per idle connection")
}

// noWorkers waits until the workers that read and wrote frames, for this
// test or an earlier one, have exited: they are the cost of traffic, not
// of idle connections.
func noWorkers(t *testing.T) {
	require.Eventually(t, func() bool { return transport.LiveWorkers() == 0 }, waitLong, 50*time.Millisecond,
		"workers still alive")
}

func onlineCount(t *testing.T, base string) int {
	s := &testServer{srv: &httptest.Server{URL: base}}
	var p struct{ Count int }
	s.getJSON(t, "/api/presence?limit=0", &p)
	return p.Count
}

// memInUse is the live heap plus goroutine stacks after a full GC.
func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// memClasses are the runtime's memory classes that an idle connection can
// grow, by name.
var memClasses = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/metadata/other:bytes",
	"/memory/classes/metadata/mspan/inuse:bytes",
	"/memory/classes/other:bytes",
	"/memory/classes/total:bytes",
	"/gc/heap/goal:bytes",
	"/gc/stack/starting-size:bytes",
}

func readMemClasses() []metrics.Sample {
	s := make([]metrics.Sample, len(memClasses))
	for i, name := range memClasses {
		s[i].Name = name
	}
	metrics.Read(s)
	return s
}

func logMemClasses(t *testing.T, before, after []metrics.Sample, n int) {
	for i := range before {
		b, a := before[i].Value.Uint64(), after[i].Value.Uint64()
		t.Logf("%-45s %12d -> %12d  %+8.0f B per connection", before[i].Name, b, a, (float64(a)-float64(b))/float64(n))
	}
}

// runMemClients is the child: it opens the connections, one user each, in
// the lobby and a room of 50, sends a ping, says "ready" and holds them,
// reading what the server sends, until its stdin closes: idle, but after
// a frame was handled.
func runMemClients(t *testing.T, addr string) {
	n, err := strconv.Atoi(os.Getenv("PRESENCED_MEMTEST_N"))
	require.NoError(t, err)
	conns := make([]*websocket.Conn, n)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				ws, _, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://%s/ws?uid=m%d&channels=lobby,room-%d", addr, i, i/50), nil)
				for range 3 { // welcome and two snapshots
					if err == nil {
						_, _, err = ws.ReadMessage()
					}
				}
				if err == nil {
					err = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`))
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "memtest client:", err)
					os.Exit(1)
				}
				conns[i] = ws
				// Keep reading, as a client does: the lobby's diffs for
				// 15,000 joins would otherwise fill the socket buffers and
				// hold the server's writers.
				go func() {
					for {
						if _, _, err := ws.ReadMessage(); err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	wg.Wait()
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, ws := range conns {
		ws.Close()
	}
}
