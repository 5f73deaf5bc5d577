package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/transport"
)

// The defaults keep the test small; docs/operations.md has the figures of
// -maxconns.limit 2000 -maxconns.offer 2500.
var (
	fdLimit = flag.Int("maxconns.limit", 200, "file descriptor limit of the server in TestMaxConnsKeepsTheServerReachable")
	offered = flag.Int("maxconns.offer", 260, "WebSockets offered to it, more than its limit")
)

// TestMaxConnsKeepsTheServerReachable runs the real binary under a small
// descriptor limit and offers it more WebSockets than it has descriptors:
// it holds as many as the default -max-conns says, refuses the rest with
// 503 and Retry-After, and answers every health check and API call made
// meanwhile, each on a connection of its own.
func TestMaxConnsKeepsTheServerReachable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	limit, offer := *fdLimit, *offered
	bin := presencedtest.Build(t)
	limited := filepath.Join(t.TempDir(), "presenced-limited")
	script := fmt.Sprintf("#!/bin/sh\nulimit -n %d || exit 1\nexec %q \"$@\"\n", limit, bin)
	require.NoError(t, os.WriteFile(limited, []byte(script), 0o755))
	// A 60 s timeout: the held connections read nothing until the end.
	p := presencedtest.Start(t, limited, "-slots", "61", "-tick", "1s")
	want := transport.MaxConnsWithin(limit)
	require.Contains(t, p.Output(), fmt.Sprintf(`max_conns="%d (descriptor limit %d)"`, want, limit), "the default cap, logged")

	// Probes: each a new connection, so each needs a descriptor of its own.
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: waitLong}
	paths := []string{"/healthz", "/readyz", "/api/presence?limit=0", "/api/ring"}
	var probes, answered atomic.Int64
	stop, probed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			probes.Add(1)
			if res, err := probe.Get(p.URL + paths[i%len(paths)]); err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					answered.Add(1)
				}
			}
		}
	}()

	var (
		mu              sync.Mutex
		held            []*websocket.Conn
		refused, others int
		otherErr        error
		wg              sync.WaitGroup
		next            atomic.Int64
	)
	dialer := &websocket.Dialer{HandshakeTimeout: waitLong}
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= offer; i = int(next.Add(1)) {
				ws, res, err := dialer.Dial(fmt.Sprintf("ws://%s/ws?uid=u%d", p.Addr, i), nil)
				if err == nil {
					_, _, err = ws.ReadMessage() // the welcome
				}
				mu.Lock()
				switch {
				case err == nil:
					held = append(held, ws)
				case res != nil && res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "":
					refused++
				default:
					others++
					otherErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Ten last rounds at the cap.
	for i := range 10 * len(paths) {
		path := paths[i%len(paths)]
		probes.Add(1)
		if res, err := probe.Get(p.URL + path); assert.NoError(t, err, path) {
			res.Body.Close()
			if assert.Equal(t, http.StatusOK, res.StatusCode, path) {
				answered.Add(1)
			}
		}
	}
	close(stop)
	<-probed

	// The held connections stay: each still answers.
	stayed := 0
	for _, ws := range held {
		ws.SetReadDeadline(time.Now().Add(waitLong))
		if ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)) != nil {
			continue
		}
		for {
			_, f, err := ws.ReadMessage()
			if err != nil {
				break
			}
			if string(f) == `{"type":"pong"}` {
				stayed++
				break
			}
		}
		ws.Close()
	}
	t.Logf("descriptor limit %d, -max-conns %d, offered %d: held %d (%d still answering), refused with 503 %d, failed otherwise %d; probes answered %d of %d",
		limit, want, offer, len(held), stayed, refused, others, answered.Load(), probes.Load())
	assert.Equal(t, want, len(held), "held")
	assert.Equal(t, len(held), stayed, "the held connections stay")
	assert.Equal(t, offer-want, refused, "refused with 503 and Retry-After")
	assert.Zero(t, others, "failed otherwise: %v", otherErr)
	assert.Equal(t, probes.Load(), answered.Load(), "every probe answered")
}
