package transport_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// Bursts, floods and reconnect races never cost a healthy client its
// connection.

// 500 heartbeat users join the lobby and later time out in one step, each
// time 500 edges at once: 50 clients that read at network speed, all in the
// lobby and watching them all, get one diff and one status frame each, and
// none is closed.
func TestBurstOfEdgesClosesNoFastReader(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMessage = 16 << 10 // a watch list of 500
	s := startServer(t, cfg)
	const readers, users = 50, 500
	var uids []string
	for i := range users {
		uids = append(uids, fmt.Sprintf("hb-%03d", i))
	}
	watchList, err := json.Marshal(uids)
	require.NoError(t, err)
	var ls []*listener
	for i := range readers {
		ws, _ := s.dialIn(t, fmt.Sprintf("reader-%02d", i), "lobby")
		l := listen(ws)
		send(t, ws, `{"type":"watch","uids":`+string(watchList)+`}`)
		require.Equal(t, `{"type":"watching","online":[]}`, l.next(t))
		ls = append(ls, l)
	}
	for _, uid := range uids {
		require.Equal(t, http.StatusNoContent, s.heartbeat(t, "channels=lobby&uid="+uid, nil))
	}
	syncAll := func() {
		for _, l := range ls {
			l.sync(t)
		}
	}
	s.step(1)
	for _, l := range ls {
		// Readers that joined before this tick hear of every joiner since.
		diff := l.next(t)
		assert.Contains(t, diff, `"count":`, diff)
		assert.Contains(t, diff, `"hb-499"`)
		status := l.next(t)
		assert.True(t, strings.HasPrefix(status, `{"type":"status","online":["hb-000",`), status)
	}
	s.step(14)
	syncAll() // the readers' own keepalives
	s.step(15)
	syncAll()
	s.step(1) // the 31st step after the heartbeats: every lease ends at once
	for _, l := range ls {
		var diff struct {
			Type   string
			Count  int
			Leaves []string
		}
		require.NoError(t, json.Unmarshal([]byte(l.next(t)), &diff))
		assert.Equal(t, "presence", diff.Type)
		assert.Equal(t, readers, diff.Count)
		assert.Len(t, diff.Leaves, users)
		var st struct{ Offline []string }
		require.NoError(t, json.Unmarshal([]byte(l.next(t)), &st))
		assert.Len(t, st.Offline, users)
	}
	assert.Zero(t, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "slow"}))
	assert.Equal(t, float64(readers), metric(t, s.reg, "presenced_connections", nil))
}

// One client writes chat as fast as it can and never reads: it is cut off,
// while the others chat on and none of them is closed.
func TestFlooderIsCutOffOthersChatOn(t *testing.T) {
	cfg := testConfig()
	cfg.FrameRate, cfg.FrameBurst = 20, 40
	s := startServer(t, cfg)
	const others = 12
	var ws []*websocket.Conn
	var ls []*listener
	for i := range others {
		c, _ := s.dialIn(t, fmt.Sprintf("u%02d", i), "lobby")
		ws = append(ws, c)
		ls = append(ls, listen(c))
	}
	flooder, _ := s.dialIn(t, "flooder", "lobby")
	sent := 0
	var err error
	for ; sent < 100_000 && err == nil; sent++ {
		err = flooder.WriteMessage(websocket.TextMessage, []byte(`{"type":"chat","channel":"lobby","text":"spam"}`))
	}
	if err == nil {
		require.NoError(t, flooder.SetReadDeadline(time.Now().Add(waitLong)))
		for err == nil {
			_, _, err = flooder.ReadMessage()
		}
	}
	// The close frame, unless the reset of a socket with unread spam in it
	// overtook it: either way the server ended the flooder, for flooding.
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		assert.Equal(t, websocket.ClosePolicyViolation, ce.Code)
		assert.Equal(t, "rate limit exceeded", ce.Text)
	}
	s.waitMetric(t, "presenced_closes_total", map[string]string{"reason": "flood"}, 1)
	t.Logf("the flooder sent %d frames before it was cut off: %v", sent, err)

	for i, c := range ws {
		send(t, c, fmt.Sprintf(`{"type":"chat","channel":"lobby","text":"hello from %d"}`, i))
	}
	for _, l := range ls {
		spam, got := 0, map[string]bool{}
		for len(got) < others {
			f := l.next(t)
			switch {
			case strings.Contains(f, `"spam"`):
				spam++
			case strings.Contains(f, `"hello from`):
				got[f] = true
			}
		}
		assert.LessOrEqual(t, spam, 2*cfg.FrameBurst, "what got through of the flood")
	}
	assert.Zero(t, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "slow"}))
	// The flooder's socket finishes once its reader has drained the spam
	// queued in it; the others stay.
	s.waitMetric(t, "presenced_connections", nil, float64(others))
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "flood"}), "the flooder alone was closed")
	for i, l := range ls {
		select {
		case err := <-l.done:
			t.Errorf("reader %d was closed: %v", i, err)
		default:
		}
	}
}

// A user that reconnects at once, 200 times, with ticks falling between, is
// never told it is offline on a live connection.
func TestFastReconnectsNeverSeeThemselvesOffline(t *testing.T) {
	s := startServer(t, testConfig())
	obs, _ := s.dialIn(t, "obs", "lobby")
	o := listen(obs)
	send(t, obs, `{"type":"watch","uids":["alice"]}`)
	o.until(t, `{"type":"watching","online":[]}`)
	var told atomic.Int32
	var wg sync.WaitGroup
	var old *websocket.Conn
	for i := range 200 {
		ws, _ := s.dialIn(t, "alice", "lobby")
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"watch","uids":["alice"]}`)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, data, err := ws.ReadMessage()
				if err != nil {
					return
				}
				if strings.Contains(string(data), `"offline":["alice"]`) || strings.Contains(string(data), `"leaves":["alice"]`) {
					told.Add(1)
				}
			}
		}()
		if old != nil {
			old.Close()
		}
		old = ws
		if i%10 == 0 {
			o.sync(t)
			s.hub.Step()
		}
	}
	s.step(1)
	o.sync(t)
	old.Close()
	wg.Wait()
	assert.Zero(t, told.Load(), "a live connection of alice was told alice is offline or left")
	s.waitMetric(t, "presenced_connections", nil, 1)
	s.step(1)
	o.until(t, `{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}`)
}

func TestInvalidUTF8ClosesWith1007(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dialIn(t, "alice", "lobby")
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte("{\"type\":\"chat\",\"channel\":\"lobby\",\"text\":\"\xff\xfe\"}")))
	ce := readClose(t, ws)
	assert.Equal(t, websocket.CloseInvalidFramePayloadData, ce.Code)
	assert.Equal(t, 1.0, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "invalid"}))
}

func TestConnectionsPerUserAreCapped(t *testing.T) {
	cfg := testConfig()
	cfg.MaxConnsPerUser = 3
	s := startServer(t, cfg)
	var tabs []*websocket.Conn
	for range 3 {
		ws, _ := s.dial(t, "alice")
		tabs = append(tabs, ws)
	}
	assert.Equal(t, http.StatusTooManyRequests, s.dialStatus(t, "uid=alice", nil))
	s.dial(t, "bob") // others are not affected
	tabs[0].Close()
	s.waitMetric(t, "presenced_connections", nil, 3)
	s.dial(t, "alice") // a slot is free again
	assert.Equal(t, http.StatusTooManyRequests, s.dialStatus(t, "uid=alice", nil))
	assert.Equal(t, 2.0, metric(t, s.reg, "presenced_connections_refused_total", map[string]string{"reason": "per_user"}))
	_, err := transport.New(transport.Config{MaxConnsPerUser: -1})
	assert.Error(t, err)
}
