package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// interval is one live connection as its client saw it: from the welcome
// to the moment the client closed it or saw it end.
type interval struct {
	uid      string
	node     int
	channels []string
	from, to time.Time // to is zero while open
}

// truth is every interval of every client, in the order they began.
type truth struct {
	mu  sync.Mutex
	ivs []*interval
}

func (t *truth) open(uid string, node int, channels []string, at time.Time) *interval {
	iv := &interval{uid: uid, node: node, channels: channels, from: at}
	t.mu.Lock()
	t.ivs = append(t.ivs, iv)
	t.mu.Unlock()
	return iv
}

func (t *truth) end(iv *interval, at time.Time) {
	t.mu.Lock()
	iv.to = at
	t.mu.Unlock()
}

// snapshot copies the intervals; open ones end at until.
func (t *truth) snapshot(until time.Time) []interval {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]interval, len(t.ivs))
	for i, iv := range t.ivs {
		out[i] = *iv
		if out[i].to.IsZero() {
			out[i].to = until
		}
	}
	return out
}

// tab is one WebSocket of a user, kept open like a browser tab: it
// reconnects to another node when its connection ends. A churning tab also
// closes after a drawn lifetime, waits, and connects somewhere else.
type tab struct {
	uid      string
	home     int
	channels []string
	churn    bool
	rnd      *rand.Rand
	nodes    []string // host:port of each node
	truth    *truth
	lifetime [2]time.Duration // of a churning connection
}

var dialer = &websocket.Dialer{HandshakeTimeout: 3 * time.Second}

// between draws a duration in [lo, hi).
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// run keeps the tab connected until ctx ends; a churning tab stops when
// churnCtx ends (its last connection closed), the others go on.
func (t *tab) run(ctx, churnCtx context.Context) {
	node := t.home
	for {
		if t.churn && churnCtx.Err() != nil || ctx.Err() != nil {
			return
		}
		stay := ctx.Done()
		var timer <-chan time.Time
		if t.churn {
			stay = churnCtx.Done()
			timer = time.After(between(t.rnd, t.lifetime[0], t.lifetime[1]))
		}
		closedByUs := t.connectOnce(node, stay, timer)
		if closedByUs {
			if !sleep(ctx, between(t.rnd, 200*time.Millisecond, 3*time.Second)) {
				return
			}
			node = t.rnd.IntN(len(t.nodes))
			continue
		}
		// Lost or refused: like an app, back off a little and try another node.
		if !sleep(ctx, between(t.rnd, 100*time.Millisecond, 600*time.Millisecond)) {
			return
		}
		node = (node + 1 + t.rnd.IntN(len(t.nodes)-1)) % len(t.nodes)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// connectOnce dials node, logs the live interval, and returns when the
// connection ends: true when the tab closed it (stop or timer).
func (t *tab) connectOnce(node int, stop <-chan struct{}, timer <-chan time.Time) bool {
	ws, err := connect(t.nodes[node], t.uid, t.channels)
	if err != nil {
		return false
	}
	defer ws.Close()
	iv := t.truth.open(t.uid, node, t.channels, time.Now())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			// Frames are read at network speed; gorilla answers the
			// server's pings.
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	}()
	select {
	case <-ended:
		t.truth.end(iv, time.Now())
		return false
	case <-stop:
	case <-timer:
	}
	t.truth.end(iv, time.Now())
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
	}
	return true
}

// connect dials addr as uid in channels and returns once the welcome
// arrived: from then on the server holds the connection, and the user is
// live.
func connect(addr, uid string, channels []string) (*websocket.Conn, error) {
	q := url.Values{"uid": {uid}}
	if len(channels) > 0 {
		q.Set("channels", strings.Join(channels, ","))
	}
	ws, _, err := dialer.Dial("ws://"+addr+"/ws?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	var welcome struct{ Type, UID string }
	_, b, err := ws.ReadMessage()
	if err == nil {
		err = json.Unmarshal(b, &welcome)
	}
	if err == nil && (welcome.Type != "welcome" || welcome.UID != uid) {
		err = fmt.Errorf("first frame %.100s, want a welcome for %s", b, uid)
	}
	if err != nil {
		ws.Close()
		return nil, fmt.Errorf("%s as %s: %w", addr, uid, err)
	}
	_ = ws.SetReadDeadline(time.Time{})
	return ws, nil
}

// population is the clients of a run, split as in production: stable
// users, users with a tab on each of two nodes, churning users; each in 1-3
// of the channels.
func population(n, nodes int, channels []string, seed uint64, lifetime [2]time.Duration) []*tab {
	r := rand.New(rand.NewPCG(seed, 2))
	stable, twoTab := n/2, n/10
	var tabs []*tab
	newTab := func(uid string, home int, chans []string, churn bool) *tab {
		return &tab{uid: uid, home: home % nodes, channels: chans, churn: churn,
			rnd: rand.New(rand.NewPCG(seed, r.Uint64())), lifetime: lifetime}
	}
	pick := func() []string {
		k := 1 + r.IntN(3)
		perm := r.Perm(len(channels))[:k]
		out := make([]string, k)
		for i, j := range perm {
			out[i] = channels[j]
		}
		return out
	}
	for i := range stable {
		tabs = append(tabs, newTab(fmt.Sprintf("s%03d", i), i, pick(), false))
	}
	for i := range twoTab {
		chans := pick()
		uid := fmt.Sprintf("t%03d", i)
		tabs = append(tabs, newTab(uid, i, chans, false), newTab(uid, i+1, chans, false))
	}
	for i := range n - stable - twoTab {
		tabs = append(tabs, newTab(fmt.Sprintf("c%03d", i), r.IntN(nodes), pick(), true))
	}
	return tabs
}
