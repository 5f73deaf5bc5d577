package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

// Redis stalls (SIGSTOP) for twice the timeout under a node of 500 users who
// only ping and one who chats every 100 ms. Nobody is closed, the other node
// sees nobody leave, every chat is delivered once or refused with an error
// frame, /readyz says 503 during the stall and 200 after, and the counts
// converge when Redis is back.
func TestRedisStallClosesNobody(t *testing.T) {
	runStall(t, stallScenario{slots: 11, tick: 200 * time.Millisecond, users: 500, rooms: 5, watched: 100})
}

// TestMeasureRedisStallDefaultRatio is the same on a 31-slot ring, the
// default, stepping every 200 ms (a 6 s timeout, a 12 s stall), or every
// PRESENCED_MEASURE_TICK (1s: the default 30 s timeout). It takes 20 s
// and more, so it runs only with PRESENCED_MEASURE=1.
func TestMeasureRedisStallDefaultRatio(t *testing.T) {
	if os.Getenv("PRESENCED_MEASURE") == "" {
		t.Skip("set PRESENCED_MEASURE=1 to run the stall on a 31-slot ring (takes 20 s and more)")
	}
	tick := 200 * time.Millisecond
	if s := os.Getenv("PRESENCED_MEASURE_TICK"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err)
		tick = d
	}
	runStall(t, stallScenario{slots: 31, tick: tick, users: 500, rooms: 5, watched: 100})
}

type stallScenario struct {
	slots   int
	tick    time.Duration
	users   int // on node a, one WebSocket each, spread over the rooms
	rooms   int
	watched int // users the observer on node b watches, besides the chatter
}

func (s stallScenario) timeout() time.Duration { return time.Duration(s.slots-1) * s.tick }

func room(i int) string { return "room-" + strconv.Itoa(i) }

func runStall(t *testing.T, s stallScenario) {
	began := time.Now()
	timeout := s.timeout()
	wait := max(testWait, 4*timeout) // for what must happen eventually
	srv := startRedis(t)
	start := func(name string, wrap func(*Engine) presence.Engine) (*httptest.Server, *transport.Hub) {
		hs, _, h := startHubConfig(t, Config{Client: srv.client(t), Node: name, Prefix: "stall", Timeout: timeout},
			transport.Config{Slots: s.slots, Tick: s.tick}, wrap)
		return hs, h
	}
	outcomes := &publishOutcomes{errs: map[string]error{}}
	var engA *Engine
	hsA, hubA := start("a", func(e *Engine) presence.Engine {
		engA = e
		return &outcomeEngine{Engine: e, out: outcomes}
	})
	hsB, hubB := start("b", nil)
	ctx := context.Background()

	// The truth: who is in which room, once everybody is connected.
	truth := make(map[string]int, s.rooms)
	for i := range s.rooms {
		truth[room(i)] = 1 // the observer
	}
	for i := range s.users {
		truth[room(i%s.rooms)]++
	}
	truth[room(0)]++ // the chatter

	// The observer on b: in every room, watching the chatter and some users.
	obs := &observer{counts: map[string]int{}, online: map[string]bool{}, chats: map[string]int{}, arrived: map[string]time.Time{}}
	rooms := make([]string, s.rooms)
	for i := range rooms {
		rooms[i] = room(i)
	}
	observerWS := dialPeer(t, hsB, "observer", rooms, obs.see)
	watched := []string{"chatter"}
	for i := range s.watched {
		watched = append(watched, "user-"+strconv.Itoa(i))
	}
	list, err := json.Marshal(watched)
	require.NoError(t, err)
	require.NoError(t, observerWS.send(`{"type":"watch","uids":`+string(list)+`}`))
	require.Eventually(t, func() bool { return obs.watching.Load() }, wait, 10*time.Millisecond, "the observer's watch list")

	// The users on a: they only ping, every quarter of the timeout.
	stop := make(chan struct{})
	var pingers sync.WaitGroup
	var pong pongStats
	users := make([]*peer, s.users)
	for i := range users {
		p := &pinged{stats: &pong}
		users[i] = dialPeer(t, hsA, "user-"+strconv.Itoa(i), []string{room(i % s.rooms)}, p.see)
		p.peer = users[i]
		pingers.Go(func() { p.run(stop, timeout/4) })
	}
	defer func() {
		close(stop)
		pingers.Wait()
	}()
	// The chatter on a, in room-0.
	ch := &chatter{own: map[string]int{}, at: map[string]time.Time{}}
	ch.peer = dialPeer(t, hsA, "chatter", []string{room(0)}, ch.see)

	eventually(t, "everybody counted, on both nodes and by the observer", func(c *assert.CollectT) {
		for r, want := range truth {
			for _, h := range []*transport.Hub{hubA, hubB} {
				n, _, err := h.Members(ctx, r, 0)
				assert.NoError(c, err)
				assert.Equal(c, want, n, "%s's members", r)
			}
		}
		assert.Equal(c, truth, obs.countsNow(), "the observer's counts")
		assert.Equal(c, len(watched), obs.onlineNow(), "watched users online for the observer")
	})
	setUp := time.Now()

	// Chat every 100 ms until told to stop.
	chatStop, chatDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(chatDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-chatStop:
				return
			case <-tick.C:
				ch.chat()
			}
		}
	}()
	require.Eventually(t, func() bool { return obs.chatCount() >= 3 }, wait, 10*time.Millisecond, "chats before the stall")

	// The stall, with readiness asked all along on both nodes, and a
	// newcomer on a who connects, joins and watches while Redis is away.
	srv.freeze(true)
	frozen := time.Now()
	readyCtx, readyStop := context.WithCancel(ctx)
	var probes sync.WaitGroup
	var ready readySamples
	for _, hs := range []*httptest.Server{hsA, hsB} {
		probes.Go(func() { ready.sample(readyCtx, hs.URL+"/readyz", 50*time.Millisecond) })
	}
	pong.countFrom(frozen)
	refusedBefore := outcomes.refusedCount()
	// The stall itself, twice the timeout, while a newcomer on a joins and
	// watches on and on. Redis stays stopped until each of its calls is
	// answered: a connect, join or watch that waited for Redis would never
	// be.
	late := newcomer(t, hsA, timeout)
	for time.Since(frozen) < 2*timeout {
		late.again(t)
		select {
		case <-time.After(timeout / 8):
		case <-time.After(time.Until(frozen.Add(2 * timeout))):
		}
	}
	// Nor does Redis come back before a ping sent during the stall has its
	// pong, and Publish has refused a chat: neither waits for Redis. (How
	// long they took is logged below.)
	require.Eventually(t, func() bool { return pong.answeredSince() > 0 }, wait, 10*time.Millisecond,
		"a pong, while Redis is stopped, to a ping sent since")
	require.Eventually(t, func() bool { return outcomes.refusedCount() > refusedBefore }, wait, 10*time.Millisecond,
		"a chat refused by Publish while Redis is stopped")
	srv.freeze(false)
	thawed := time.Now()
	readyStop()
	probes.Wait()
	sentAtThaw := ch.sent.Load()

	for _, hs := range []*httptest.Server{hsA, hsB} {
		require.Eventually(t, func() bool { return readyz(hs.URL+"/readyz") == http.StatusOK }, wait, 20*time.Millisecond, "ready after the stall")
	}
	readyAfter := time.Since(thawed)
	require.Eventually(t, func() bool { return obs.deliveredAfter(sentAtThaw) >= 3 }, wait, 10*time.Millisecond, "chats after the stall")
	close(chatStop)
	<-chatDone
	// A last chat, once every earlier one has been answered: when the
	// observer has it, it has every earlier one that will ever arrive.
	require.Eventually(t, func() bool { return ch.answered() }, wait, 10*time.Millisecond, "every chat answered")
	require.NoError(t, ch.peer.send(`{"type":"chat","channel":"room-0","text":"last"}`))
	require.Eventually(t, func() bool { return obs.chatSeen("last") && ch.ownSeen("last") }, wait, 10*time.Millisecond, "the last chat")

	counted := maps.Clone(truth) // and the newcomer's room, which the observer did not join
	counted[late.room] = 1
	eventually(t, "counts converge on both nodes and for the observer", func(c *assert.CollectT) {
		for r, want := range counted {
			for _, h := range []*transport.Hub{hubA, hubB} {
				n, _, err := h.Members(ctx, r, 0)
				assert.NoError(c, err)
				assert.Equal(c, want, n, "%s's members", r)
			}
		}
		assert.Equal(c, truth, obs.countsNow(), "the observer's counts")
		for _, uid := range []string{"user-0", "user-" + strconv.Itoa(s.users-1), "chatter", "observer", "late"} {
			for _, h := range []*transport.Hub{hubA, hubB} {
				n, err := h.Online(ctx, uid)
				assert.NoError(c, err)
				assert.Equal(c, 1, n, "%s's connections", uid)
			}
		}
	})
	converged := time.Since(thawed)
	// A false leave would come from a claim of a's records: give the claims
	// a timeout and a renewal round more to show one.
	time.Sleep(timeout + timeout/3)

	closed := 0
	for _, p := range append(users, ch.peer, observerWS, late.peer) {
		if p.isClosed() {
			closed++
			t.Logf("%s closed: %v", p.uid, p.err)
		}
	}
	leaves, offline := obs.falseEdges()
	sent, refused := int(ch.sent.Load()), int(ch.refused.Load())
	delivered, dups := obs.delivered()
	engineRefused, notAsked := outcomes.check(t, sent, obs.chatsNow())
	ownDelivered, ownDups := ch.delivered()
	during, duringOK, after := ready.during(frozen, thawed)
	t.Logf("timeout %v, stall %v, %d users: closes %d; leaves seen on b %d, offline %d; chats sent %d, delivered %d, refused with an error %d (%d by Publish, %d waiting in the transport), lost %d, duplicates %d (the chatter's own copies: %d, duplicates %d), slowest delivered %v; "+
		"/readyz during the stall %d answers, %d of them 200, %d answered after it; 200 again %v after; counts converged %v after; "+
		"Publish outlasted its ctx by %v at worst; pong worst %v; the newcomer's connect %v, slowest of %d joins %v, of %d watches %v (a quarter timeout is %v); set up in %v",
		timeout, thawed.Sub(frozen), s.users, closed, len(leaves), len(offline), sent, delivered, refused, engineRefused, notAsked, sent-delivered-refused, dups,
		ownDelivered, ownDups, ch.slowest(obs.arrivals()), during, duringOK, after, readyAfter.Round(time.Millisecond), converged.Round(time.Millisecond),
		outcomes.worstOverrun(), pong.worst(), late.connect, late.joins, late.join, late.watches, late.watch, timeout/4, setUp.Sub(began).Round(time.Millisecond))
	assert.Zero(t, closed, "connections closed")
	assert.Empty(t, leaves, "leave diffs seen on b")
	assert.Empty(t, offline, "offline statuses seen on b")
	assert.Zero(t, dups, "chats delivered twice")
	assert.Zero(t, ownDups, "chats delivered twice to the chatter")
	assert.Equal(t, delivered, ownDelivered, "the chatter and the observer got the same chats")
	assert.Equal(t, sent, delivered+refused, "every chat delivered or refused, never both, never neither")
	assert.Equal(t, refused, engineRefused+notAsked, "error frames for refused chats")
	assert.Empty(t, ch.unexpected(), "error frames other than refused chats")
	assert.Positive(t, during, "readiness asked during the stall")
	assert.Zero(t, duringOK, "/readyz answered 200 during the stall")
	// How long the newcomer's calls, the pongs and Publish took during the
	// stall (a quarter timeout or so for the newcomer, a moment for the
	// rest) are figures of the machine's load as much as of the engine's:
	// logged above, not asserted. That none waited for Redis is checked
	// before the thaw.
	assert.Zero(t, testutil.ToFloat64(engA.m.publishedLate), "published after Publish said not")
}

// outcomeEngine records what Publish answered for each chat.
type outcomeEngine struct {
	*Engine
	out *publishOutcomes
}

func (e *outcomeEngine) Publish(ctx context.Context, m presence.Message) error {
	err := e.Engine.Publish(ctx, m)
	var f stallFrame
	if json.Unmarshal(m.Frame.Data, &f) == nil && f.Type == "chat" {
		e.out.mu.Lock()
		e.out.errs[f.Text] = err
		if err != nil {
			e.out.refused++
		}
		if d, ok := ctx.Deadline(); ok {
			e.out.overrun = max(e.out.overrun, time.Since(d))
		}
		e.out.mu.Unlock()
	}
	return err
}

type publishOutcomes struct {
	mu      sync.Mutex
	errs    map[string]error // by chat text
	refused int              // chats Publish answered with an error, so far
	overrun time.Duration    // the longest a Publish outlasted its ctx
}

func (o *publishOutcomes) refusedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.refused
}

func (o *publishOutcomes) worstOverrun() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.overrun.Round(time.Millisecond)
}

// check compares, chat by chat, what Publish answered with what the
// observer got: delivered exactly when Publish said so. It returns how many
// chats Publish refused, and how many the transport refused without asking
// it (too many waiting).
func (o *publishOutcomes) check(t *testing.T, sent int, got map[string]int) (engineRefused, notAsked int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range sent {
		text := "chat-" + strconv.Itoa(i)
		err, asked := o.errs[text]
		switch {
		case !asked:
			notAsked++
			assert.Zero(t, got[text], "%s: delivered, though never handed to the engine", text)
		case err != nil:
			engineRefused++
			assert.Zero(t, got[text], "%s: delivered, though Publish answered %v", text, err)
		default:
			assert.Equal(t, 1, got[text], "%s: Publish answered nil", text)
		}
	}
	return engineRefused, notAsked
}

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

// observer is in every room on the other node and watches some users: it
// keeps the counts and every leave and offline it hears of.
type observer struct {
	watching atomic.Bool

	mu      sync.Mutex
	counts  map[string]int // by room
	online  map[string]bool
	leaves  []string // "room uid"
	offline []string
	chats   map[string]int       // by text
	arrived map[string]time.Time // when each chat first arrived
}

func (o *observer) see(f stallFrame) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch f.Type {
	case "joined":
		o.counts[f.Channel] = f.Count
	case "presence":
		o.counts[f.Channel] = f.Count
		for _, uid := range f.Leaves {
			o.leaves = append(o.leaves, f.Channel+" "+uid)
		}
	case "watching":
		for _, uid := range f.Online {
			o.online[uid] = true
		}
		o.watching.Store(true)
	case "status":
		for _, uid := range f.Online {
			o.online[uid] = true
		}
		for _, uid := range f.Offline {
			delete(o.online, uid)
			o.offline = append(o.offline, uid)
		}
	case "chat":
		if o.chats[f.Text]++; o.chats[f.Text] == 1 {
			o.arrived[f.Text] = time.Now()
		}
	}
}

func (o *observer) countsNow() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.counts)
}

func (o *observer) onlineNow() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.online)
}

func (o *observer) chatCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.chats)
}

func (o *observer) chatSeen(text string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.chats[text] > 0
}

// deliveredAfter counts the chats numbered n or later the observer has.
func (o *observer) deliveredAfter(n int64) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := 0
	for text := range o.chats {
		if i, err := strconv.ParseInt(strings.TrimPrefix(text, "chat-"), 10, 64); err == nil && i >= n {
			k++
		}
	}
	return k
}

func (o *observer) delivered() (n, dups int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return countChats(o.chats)
}

func (o *observer) chatsNow() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.chats)
}

func (o *observer) arrivals() map[string]time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.arrived)
}

func (o *observer) falseEdges() (leaves, offline []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.leaves), slices.Clone(o.offline)
}

// late is a user who arrives while Redis is away and joins and watches on
// and on: how long its connect (to the joined snapshot) took, and the
// slowest join and watch, each answered with a snapshot or, once the wait
// for Redis is over, an error frame.
type late struct {
	*peer
	room                 string
	frames               chan stallFrame
	connect, join, watch time.Duration
	joins, watches       int
}

// newcomer connects to hs in a room of its own and pings every quarter
// timeout.
func newcomer(t *testing.T, hs *httptest.Server, timeout time.Duration) *late {
	t.Helper()
	l := &late{room: "late-room", frames: make(chan stallFrame, 64)}
	start := time.Now()
	l.peer = dialPeer(t, hs, "late", []string{l.room}, func(f stallFrame) {
		if f.Type != "pong" && f.Type != "left" {
			l.frames <- f
		}
	})
	l.connect = l.await(t, start, "connect", func(f stallFrame) bool { return f.Type == "joined" || f.Type == "error" })
	stop := make(chan struct{})
	p := &pinged{peer: l.peer, stats: &pongStats{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(stop, timeout/4)
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	return l
}

// again joins a room it never joined and leaves it, then watches a user it
// never watched, each once answered.
func (l *late) again(t *testing.T) {
	t.Helper()
	l.joins++
	ch := "late-" + strconv.Itoa(l.joins)
	start := time.Now()
	require.NoError(t, l.send(`{"type":"join","channel":"`+ch+`"}`))
	l.join = max(l.join, l.await(t, start, "join", func(f stallFrame) bool { return f.Channel == ch }))
	require.NoError(t, l.send(`{"type":"leave","channel":"`+ch+`"}`))
	l.watches++
	start = time.Now()
	require.NoError(t, l.send(`{"type":"watch","uids":["user-1","nobody-`+strconv.Itoa(l.watches)+`"]}`))
	l.watch = max(l.watch, l.await(t, start, "watch", func(f stallFrame) bool { return f.Type == "watching" || f.Type == "error" }))
}

func (l *late) await(t *testing.T, start time.Time, what string, match func(stallFrame) bool) time.Duration {
	t.Helper()
	deadline := time.After(testWait)
	for {
		select {
		case f := <-l.frames:
			if match(f) {
				return time.Since(start).Round(time.Millisecond)
			}
		case <-deadline:
			t.Fatalf("the newcomer got no answer to its %s", what)
		}
	}
}

// readySamples are /readyz answers with when they were asked and answered.
type readySamples struct {
	mu   sync.Mutex
	list []readySample
}

type readySample struct {
	asked, answered time.Time
	status          int
}

// sample asks url every so often until ctx ends.
func (r *readySamples) sample(ctx context.Context, url string, every time.Duration) {
	for ctx.Err() == nil {
		asked := time.Now()
		status := readyz(url)
		r.mu.Lock()
		r.list = append(r.list, readySample{asked, time.Now(), status})
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

// during counts the answers asked and answered within the stall (after a
// moment for SIGSTOP to take), those of them that said 200, and those
// answered after it.
func (r *readySamples) during(frozen, thawed time.Time) (n, ok, after int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.list {
		switch {
		case s.answered.After(thawed):
			after++
		case s.asked.After(frozen.Add(50 * time.Millisecond)):
			n++
			if s.status == http.StatusOK {
				ok++
			}
		}
	}
	return n, ok, after
}

// readyz returns the status /readyz answers with, 0 if none.
func readyz(url string) int {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
