package web_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// wsClient is a Go WebSocket client of presenced: another user the page can
// see, without a second browser. Its reader answers the server's pings, and
// it sends an app ping every quarter timeout, so it stays online while the
// test runs; frames wait in a buffer for next.
type wsClient struct {
	t      *testing.T
	uid    string
	ws     *websocket.Conn
	wmu    sync.Mutex
	frames chan wsFrame
	done   chan struct{}
}

// wsFrame is any server frame of the protocol, with the raw JSON for messages.
type wsFrame struct {
	Type    string   `json:"type"`
	UID     string   `json:"uid"`
	Channel string   `json:"channel"`
	Count   int      `json:"count"`
	Members []string `json:"members"`
	Joins   []string `json:"joins"`
	Leaves  []string `json:"leaves"`
	Online  []string `json:"online"`
	Offline []string `json:"offline"`
	From    string   `json:"from"`
	Text    string   `json:"text"`
	Error   string   `json:"error"`
	raw     string
}

func (f wsFrame) String() string { return f.raw }

// dialWS connects uid to the server, joining channels at connect, and
// returns once the welcome has come.
func dialWS(t *testing.T, srv *server, uid string, channels ...string) *wsClient {
	t.Helper()
	q := url.Values{"uid": {uid}}
	if len(channels) > 0 {
		q.Set("channels", strings.Join(channels, ","))
	}
	return dialQuery(t, srv, uid, q)
}

// dialQuery connects to the server with the query q (a token, channels)
// as uid, and returns once the welcome has come.
func dialQuery(t *testing.T, srv *server, uid string, q url.Values) *wsClient {
	t.Helper()
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws?" + q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	ws, res, err := websocket.DefaultDialer.DialContext(ctx, u, nil)
	require.NoError(t, err, "dial %s", u)
	res.Body.Close()
	c := &wsClient{t: t, uid: uid, ws: ws, frames: make(chan wsFrame, 1024), done: make(chan struct{})}
	go c.read()
	go c.keepalive(e2eTimeout / 4)
	t.Cleanup(c.close)
	w := c.next("welcome")
	require.Equal(t, uid, w.UID, "welcome: %s", w)
	return c
}

func (c *wsClient) read() {
	defer close(c.frames)
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var f wsFrame
		if err := json.Unmarshal(data, &f); err != nil {
			f = wsFrame{Type: "not json"}
		}
		f.raw = string(data)
		if f.Type == "pong" {
			continue
		}
		select {
		case c.frames <- f:
		default: // a test that stopped reading; keep answering pings
		}
	}
}

func (c *wsClient) keepalive(every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tk.C:
			c.wmu.Lock()
			err := c.ws.WriteJSON(map[string]string{"type": "ping"})
			c.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	require.NoError(c.t, c.ws.WriteJSON(v), "%s sends %v", c.uid, v)
}

// next returns the next frame of type typ, skipping others; it fails the
// test after e2eWait or if the connection ends first.
func (c *wsClient) next(typ string) wsFrame {
	c.t.Helper()
	deadline := time.After(e2eWait)
	var skipped []string
	for {
		select {
		case f, ok := <-c.frames:
			require.True(c.t, ok, "%s: connection closed waiting for a %q frame (skipped %v)", c.uid, typ, skipped)
			if f.Type == typ {
				return f
			}
			skipped = append(skipped, f.raw)
		case <-deadline:
			c.t.Fatalf("%s: no %q frame in %v (skipped %v)", c.uid, typ, e2eWait, skipped)
		}
	}
}

// close ends the connection normally; it may be called more than once.
func (c *wsClient) close() {
	select {
	case <-c.done:
		return
	default:
	}
	close(c.done)
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
	c.wmu.Unlock()
	_ = c.ws.Close()
}
