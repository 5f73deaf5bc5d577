package cluster

import (
	"encoding/base64"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/ssetest"
	"github.com/presenced/presenced/transport"
)

// A POST that reaches a node other than the one holding the stream is
// forwarded there through Redis and answered as that node answers it.
func TestSSEPostForwardedToTheNodeHoldingTheStream(t *testing.T) {
	srv := startRedis(t)
	tc := transport.Config{Slots: 31, Tick: 100 * time.Millisecond, FrameRate: 0.001, FrameBurst: 4}
	a, _, _ := startHubConfig(t, testConfig(srv.client(t), "a"), tc, nil)
	b, _, _ := startHubConfig(t, testConfig(srv.client(t), "b"), tc, nil)

	s, err := ssetest.Open(a.URL, "uid=alice", nil)
	require.NoError(t, err)
	defer s.Close()
	post := func(body string) (int, string) {
		status, answer, err := s.Post(b.URL, body)
		require.NoError(t, err)
		return status, answer
	}
	status, answer := post(`{"type":"join","channel":"lobby"}` + "\n" + `{"type":"ping"}`)
	require.Equal(t, http.StatusNoContent, status, answer)
	require.NoError(t, s.Until(`{"type":"joined","channel":"lobby","count":1,"members":["alice"]}`, 10*time.Second))
	require.NoError(t, s.Until(`{"type":"pong"}`, 10*time.Second))

	// Limits are the holding node's: its counters, its answer.
	status, answer = post(`{"type":"ping"}` + "\n" + strings.Repeat("x", 5000))
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, answer)
	status, answer = post(`{"type":"ping"}` + "\n" + `{"type":"ping"}` + "\n" + `{"type":"ping"}`)
	assert.Equal(t, http.StatusTooManyRequests, status, answer)
	assert.Contains(t, answer, "2 of the 3 frames were queued")

	// A session of node a that a does not hold; a well-formed session of
	// no node; one of a stream that ended.
	unknown := s.Session[:strings.LastIndexByte(s.Session, '.')+1] + strings.Repeat("A", 22)
	status, answer, err = ssetest.Post(b.URL, unknown, `{"type":"ping"}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, status, answer)
	s.Close()
	require.Eventually(t, func() bool {
		status, _ := post(`{"type":"ping"}`)
		return status == http.StatusNotFound
	}, 10*time.Second, 20*time.Millisecond)
}

// A session whose node is gone, or that names a node that never was (a
// forged one), is no session: 404 at once, as Redis says nobody listens
// there, rather than a wait for an answer that cannot come.
func TestSSEPostForwardedToANodeThatIsGone(t *testing.T) {
	srv := startRedis(t)
	tc := transport.Config{Slots: 31, Tick: 100 * time.Millisecond}
	a, _, ha := startHubConfig(t, testConfig(srv.client(t), "a"), tc, nil)
	b, _, _ := startHubConfig(t, testConfig(srv.client(t), "b"), tc, nil)
	s, err := ssetest.Open(a.URL, "uid=alice", nil)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, ha.Shutdown(t.Context()))
	start := time.Now()
	status, answer, err := s.Post(b.URL, `{"type":"ping"}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, status, answer)
	assert.Less(t, time.Since(start), 10*time.Second)

	forged := base64.RawURLEncoding.EncodeToString([]byte("nobody")) + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 16))
	status, answer, err = ssetest.Post(b.URL, forged, `{"type":"ping"}`)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, status, answer)
}

// TestSSEForwardLatency reports, with -v, the latency of a ping POSTed to
// the node holding its stream and to the other node, p50 and p99.
func TestSSEForwardLatency(t *testing.T) {
	if os.Getenv("PRESENCED_MEASURE") == "" {
		t.Skip("a measurement: set PRESENCED_MEASURE=1")
	}
	srv := startRedis(t)
	tc := transport.Config{Slots: 31, Tick: 100 * time.Millisecond, FrameRate: 1e6, FrameBurst: 1 << 20, ByteRate: 1 << 30}
	a, _, _ := startHubConfig(t, testConfig(srv.client(t), "a"), tc, nil)
	b, _, _ := startHubConfig(t, testConfig(srv.client(t), "b"), tc, nil)
	s, err := ssetest.Open(a.URL, "uid=alice", nil)
	require.NoError(t, err)
	defer s.Close()
	measure := func(base string) (p50, p99 time.Duration) {
		var took []time.Duration
		for range 300 {
			start := time.Now()
			status, answer, err := s.Post(base, `{"type":"ping"}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusNoContent, status, answer)
			took = append(took, time.Since(start))
			require.NoError(t, s.Until(`{"type":"pong"}`, 10*time.Second))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		return took[len(took)/2], took[len(took)*99/100]
	}
	l50, l99 := measure(a.URL)
	f50, f99 := measure(b.URL)
	t.Logf("POST to the holding node: p50 %v p99 %v; forwarded: p50 %v p99 %v", l50, l99, f50, f99)
}
