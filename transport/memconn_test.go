package transport_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

const memClientsEnv = "PRESENCED_MEMTEST_DIAL"

// TestMemoryPerIdleConnection measures what an idle WebSocket costs the
// server: heap and goroutine stacks after a GC, divided by the connections.
// The clients live in a child process (this test binary), so their memory
// is not counted.
func TestMemoryPerIdleConnection(t *testing.T) {
	if addr := os.Getenv(memClientsEnv); addr != "" {
		runMemClients(t, addr)
		return
	}
	if testing.Short() || raceEnabled {
		t.Skip("a measurement: skipped with -short and under -race")
	}
	const n = 500
	hub, err := transport.New(transport.Config{Slots: 31, Tick: time.Second}) // no ping within the test
	require.NoError(t, err)
	srv := httptest.NewServer(hub)
	defer srv.Close()
	defer hub.Shutdown(t.Context())

	before := memInUse()
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
	after := memInUse()
	perConn := float64(after-before) / n
	perGoroutine := float64(runtime.NumGoroutine()-goroutines) / n
	t.Logf("idle WebSocket: %.0f B of heap+stack per connection, %.2f goroutines per connection (%d connections)", perConn, perGoroutine, n)
	assert.Less(t, perConn, 16*1024.0, "bytes per idle connection")
	assert.InDelta(t, 1.0, perGoroutine, 0.05, "only the reader is parked")
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

// runMemClients is the child: it opens the connections, one user each, in
// the lobby and a room of 50, sends a ping, says "ready" and holds them
// until its stdin closes: idle, but after a frame was handled.
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
