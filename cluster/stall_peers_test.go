package cluster

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
)

// stallFrame is any frame the scenario's clients read.
type stallFrame struct {
	Type    string   `json:"type"`
	Channel string   `json:"channel"`
	Count   int      `json:"count"`
	Joins   []string `json:"joins"`
	Leaves  []string `json:"leaves"`
	Online  []string `json:"online"`
	Offline []string `json:"offline"`
	From    string   `json:"from"`
	Text    string   `json:"text"`
	Error   string   `json:"error"`
}

// peer is one WebSocket whose frames a goroutine of its own reads and hands
// to see, until the connection ends.
type peer struct {
	uid  string
	ws   *websocket.Conn
	wmu  sync.Mutex // one writer at a time
	done chan struct{}
	err  error // why the reader stopped; read after done
}

func dialPeer(t *testing.T, hs *httptest.Server, uid string, channels []string, see func(stallFrame)) *peer {
	t.Helper()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws?uid=" + uid + "&channels=" + strings.Join(channels, ",")
	ws, resp, err := websocket.DefaultDialer.Dial(url, nil)
	require.NoError(t, err, "dial %s", uid)
	resp.Body.Close()
	p := &peer{uid: uid, ws: ws, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				p.err = err
				return
			}
			var f stallFrame
			if err := json.Unmarshal(data, &f); err != nil {
				p.err = fmt.Errorf("frame %s: %w", data, err)
				return
			}
			see(f)
		}
	}()
	t.Cleanup(func() {
		ws.Close()
		<-p.done
	})
	return p
}

func (p *peer) send(frame string) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.ws.SetWriteDeadline(time.Now().Add(testWait))
	return p.ws.WriteMessage(websocket.TextMessage, []byte(frame))
}

func (p *peer) isClosed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// pinged is a user who only pings, and times the pongs.
type pinged struct {
	*peer
	stats *pongStats
	mu    sync.Mutex
	sent  []time.Time // pings not answered yet, oldest first
}

func (p *pinged) run(stop <-chan struct{}, every time.Duration) {
	// Spread the users over the interval, as real clients are.
	select {
	case <-stop:
		return
	case <-time.After(rand.N(every)):
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		p.mu.Lock()
		p.sent = append(p.sent, time.Now())
		p.mu.Unlock()
		if p.send(`{"type":"ping"}`) != nil {
			return
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

func (p *pinged) see(f stallFrame) {
	if f.Type != "pong" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sent) > 0 {
		p.stats.observe(p.sent[0])
		p.sent = p.sent[1:]
	}
}

type pongStats struct {
	worstNs atomic.Int64
	fromNs  atomic.Int64 // Unix ns: pongs to pings sent since then are counted
	since   atomic.Int64 // pongs to pings sent since fromNs
}

// countFrom starts counting the pongs to pings sent from t on.
func (s *pongStats) countFrom(t time.Time) { s.fromNs.Store(t.UnixNano()) }

func (s *pongStats) answeredSince() int64 { return s.since.Load() }

// observe records the pong to a ping sent at sent.
func (s *pongStats) observe(sent time.Time) {
	if from := s.fromNs.Load(); from != 0 && sent.UnixNano() >= from {
		s.since.Add(1)
	}
	d := time.Since(sent)
	for {
		w := s.worstNs.Load()
		if int64(d) <= w || s.worstNs.CompareAndSwap(w, int64(d)) {
			return
		}
	}
}

func (s *pongStats) worst() time.Duration {
	return time.Duration(s.worstNs.Load()).Round(time.Millisecond)
}

// chatter chats in room-0 and counts what comes back: its own chats, and
// error frames for those not delivered.
type chatter struct {
	*peer
	sent    atomic.Int64
	refused atomic.Int64

	mu    sync.Mutex
	own   map[string]int       // chats of its own it received, by text
	at    map[string]time.Time // when each chat was sent
	other []string             // error frames that do not refuse a chat
}

func (c *chatter) chat() {
	n := c.sent.Load()
	text := "chat-" + strconv.FormatInt(n, 10)
	at := time.Now()
	if c.send(`{"type":"chat","channel":"room-0","text":"`+text+`"}`) == nil {
		c.mu.Lock()
		c.at[text] = at
		c.mu.Unlock()
		c.sent.Add(1)
	}
}

// slowest returns the longest a chat took from the chatter to the observer.
func (c *chatter) slowest(got map[string]time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var worst time.Duration
	for text, at := range got {
		if sent, ok := c.at[text]; ok {
			worst = max(worst, at.Sub(sent))
		}
	}
	return worst.Round(time.Millisecond)
}

func (c *chatter) see(f stallFrame) {
	switch {
	case f.Type == "error" && f.Channel == room(0) && strings.HasPrefix(f.Error, "chat not delivered"):
		c.refused.Add(1)
	case f.Type == "error":
		c.mu.Lock()
		c.other = append(c.other, f.Error)
		c.mu.Unlock()
	case f.Type == "chat" && f.From == "chatter":
		c.mu.Lock()
		c.own[f.Text]++
		c.mu.Unlock()
	}
}

// answered reports whether every chat sent so far came back or was refused.
func (c *chatter) answered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.own))+c.refused.Load() >= c.sent.Load()
}

func (c *chatter) ownSeen(text string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.own[text] > 0
}

// delivered counts the distinct chats the chatter got back, but the last,
// and those it got more than once.
func (c *chatter) delivered() (n, dups int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return countChats(c.own)
}

func (c *chatter) unexpected() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.other)
}

func countChats(m map[string]int) (n, dups int) {
	for text, k := range m {
		if text == "last" {
			continue
		}
		n++
		dups += k - 1
	}
	return n, dups
}
