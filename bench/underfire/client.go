package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

var dialer = &websocket.Dialer{HandshakeTimeout: 10 * time.Second}

// frame is what the harness reads of a server frame.
type frame struct {
	Type    string   `json:"type"`
	Channel string   `json:"channel"`
	From    string   `json:"from"`
	Online  []string `json:"online"`
	Offline []string `json:"offline"`
	Joins   []string `json:"joins"`
	Leaves  []string `json:"leaves"`
	Count   int      `json:"count"`
}

// client is a gorilla connection whose reader runs at network speed and
// answers the server's pings (gorilla's default ping handler).
type client struct {
	uid string
	ws  *websocket.Conn

	mu     sync.Mutex
	onText func(f *frame, raw []byte) // called on the reader goroutine

	local   atomic.Bool // the harness closed it
	ended   chan struct{}
	endErr  error
	endedAt time.Time
}

func dial(addr, query string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	return dialer.Dial("ws://"+addr+"/ws?"+query, hdr)
}

// connect dials and starts the reader; onText may be nil.
func connect(addr, uid, query string, onText func(*frame, []byte)) (*client, error) {
	q := "uid=" + uid
	if query != "" {
		q += "&" + query
	}
	ws, _, err := dial(addr, q, nil)
	if err != nil {
		return nil, err
	}
	c := &client{uid: uid, ws: ws, onText: onText, ended: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *client) read() {
	for {
		mt, data, err := c.ws.ReadMessage()
		if err != nil {
			c.endErr, c.endedAt = err, time.Now()
			close(c.ended)
			return
		}
		if mt != websocket.TextMessage || c.onText == nil {
			continue
		}
		var f frame
		if json.Unmarshal(data, &f) == nil {
			c.onText(&f, data)
		}
	}
}

// isEnded reports whether the reader stopped for a reason other than the
// harness's own close.
func (c *client) isEnded() bool {
	select {
	case <-c.ended:
		return !c.local.Load()
	default:
		return false
	}
}

// send writes a text frame; gorilla allows one writer at a time.
func (c *client) send(s string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, []byte(s))
}

// close ends the connection from the harness's side: a close frame, then the
// socket.
func (c *client) close() {
	c.local.Store(true)
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.ws.Close()
}

// endKind names how a connection ended: a close code, or the transport error.
func endKind(err error) string {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		return strconv.Itoa(ce.Code)
	}
	switch {
	case err == nil:
		return "open"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	return err.Error()
}

// endDetail is endKind with the close reason, if the server gave one.
func endDetail(err error) string {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok && ce.Text != "" {
		return fmt.Sprintf("%d %q", ce.Code, ce.Text)
	}
	return endKind(err)
}

// tally counts the clients the server ended, by how.
func tally(cs []*client) (int, string) {
	by := map[string]int{}
	n := 0
	for _, c := range cs {
		if c.isEnded() {
			n++
			by[endDetail(c.endErr)]++
		}
	}
	if n == 0 {
		return 0, "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%d× %s", by[k], k))
	}
	return n, strings.Join(parts, ", ")
}

// closeAll closes the clients of cs; nil entries were never connected.
func closeAll(cs []*client) {
	for _, c := range cs {
		if c != nil {
			c.close()
		}
	}
}

// waitFor polls cond every 20 ms until it holds or d passes; it reports
// whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

func watchFrame(uids []string) string {
	b, _ := json.Marshal(map[string]any{"type": "watch", "uids": uids})
	return string(b)
}

// watcher follows how many of its watched users a client knows online.
type watcher struct {
	watching atomic.Bool
	online   atomic.Int64
	offline  atomic.Int64 // offline IDs received in status frames
	statuses atomic.Int64
}

func (w *watcher) onText(f *frame, _ []byte) {
	switch f.Type {
	case "watching":
		w.online.Store(int64(len(f.Online)))
		w.watching.Store(true)
	case "status":
		w.statuses.Add(1)
		w.online.Add(int64(len(f.Online) - len(f.Offline)))
		w.offline.Add(int64(len(f.Offline)))
	}
}

// watchers connects n clients uid prefix+i to addr with query, each sending
// watch of uids, and waits for every watching answer. On error it closes
// those it connected.
func watchers(addr, prefix string, n int, query string, uids []string) ([]*client, []*watcher, error) {
	cs := make([]*client, n)
	ws := make([]*watcher, n)
	wf := watchFrame(uids)
	for i := range n {
		w := &watcher{}
		c, err := connect(addr, fmt.Sprintf("%s%04d", prefix, i), query, w.onText)
		if err != nil {
			closeAll(cs)
			return nil, nil, fmt.Errorf("dial %s%04d: %w", prefix, i, err)
		}
		cs[i], ws[i] = c, w
		if err := c.send(wf); err != nil {
			closeAll(cs)
			return nil, nil, fmt.Errorf("watch: %w", err)
		}
	}
	if !waitFor(20*time.Second, func() bool {
		for _, w := range ws {
			if !w.watching.Load() {
				return false
			}
		}
		return true
	}) {
		closeAll(cs)
		return nil, nil, errors.New("not every watcher got its watching frame")
	}
	return cs, ws, nil
}
