package transport_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// Past MaxConns an upgrade is refused with 503, Retry-After and a JSON
// error, counted; the server API and the health checks still answer, and
// a closed connection makes room again.
func TestMaxConnsRefusesUpgradesPastTheCap(t *testing.T) {
	cfg := testConfig()
	cfg.MaxConns = 3
	s := startServer(t, cfg)
	assert.Equal(t, 3.0, metric(t, s.reg, "presenced_connections_max", nil))
	var held []*websocket.Conn
	for _, uid := range []string{"alice", "bob", "carol"} {
		ws, _ := s.dial(t, uid)
		held = append(held, ws)
	}
	for range 2 {
		ws, resp, err := websocket.DefaultDialer.Dial(s.wsURL("uid=dave"), nil)
		if ws != nil {
			ws.Close()
		}
		require.ErrorIs(t, err, websocket.ErrBadHandshake)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, "10", resp.Header.Get("Retry-After"))
		var e struct{ Error string }
		require.NoError(t, json.Unmarshal(body, &e), "%s", body)
		assert.Contains(t, e.Error, "-max-conns")
	}
	assert.Equal(t, 2.0, metric(t, s.reg, "presenced_connections_refused_total", map[string]string{"reason": "max_conns"}))
	assert.Zero(t, metric(t, s.reg, "presenced_connections_refused_total", map[string]string{"reason": "per_user"}))
	for _, path := range []string{"/healthz", "/readyz", "/api/presence", "/api/ring"} {
		var v any
		assert.Equal(t, http.StatusOK, s.getJSON(t, path, &v), path)
	}

	held[0].Close()
	s.waitMetric(t, "presenced_connections", nil, 2)
	s.dial(t, "dave") // room again
	assert.Equal(t, http.StatusServiceUnavailable, s.dialStatus(t, "uid=erin", nil))

	_, err := transport.New(transport.Config{MaxConns: -1})
	assert.Error(t, err)
}

func TestMaxConnsWithin(t *testing.T) {
	for _, limit := range []int{-1, 0} {
		assert.Zero(t, transport.MaxConnsWithin(limit), "no limit, no cap")
	}
	assert.Equal(t, 150, transport.MaxConnsWithin(200), "a small limit keeps a quarter")
	assert.Equal(t, 1, transport.MaxConnsWithin(1))
	for _, limit := range []int{1024, 2000, 65536, 1 << 20} {
		n := transport.MaxConnsWithin(limit)
		assert.Less(t, n, limit, limit)
		assert.GreaterOrEqual(t, n, limit*3/4, limit)
		assert.GreaterOrEqual(t, limit-n, 128, "%d: the fixed reserve", limit)
	}
}
