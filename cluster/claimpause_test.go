package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// prober pings a node every 10 ms with {"type":"ping"} text frames and
// records each pong's round trip and when its ping went out.
type prober struct {
	ws   *websocket.Conn
	mu   sync.Mutex
	sent []time.Time
	rtts []rtt
	stop chan struct{}
	done sync.WaitGroup
}

type rtt struct {
	at time.Time
	d  time.Duration
}

func startProber(t *testing.T, url string) *prober {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(url, nil)
	require.NoError(t, err)
	resp.Body.Close()
	p := &prober{ws: ws, stop: make(chan struct{})}
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var f frame
			if json.Unmarshal(data, &f) != nil || f.Type != "pong" {
				continue
			}
			now := time.Now()
			p.mu.Lock()
			if len(p.sent) > 0 {
				p.rtts = append(p.rtts, rtt{p.sent[0], now.Sub(p.sent[0])})
				p.sent = p.sent[1:]
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		defer p.done.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				p.mu.Lock()
				p.sent = append(p.sent, time.Now())
				p.mu.Unlock()
				if ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)) != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { p.close() })
	return p
}

func (p *prober) close() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	p.ws.Close()
	p.done.Wait()
}

// longest returns the longest round trip of the pings sent in [from, to),
// how many there were, and how many of those got no pong.
func (p *prober) longest(from, to time.Time) (time.Duration, int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var most time.Duration
	n := 0
	for _, r := range p.rtts {
		if !r.at.Before(from) && r.at.Before(to) {
			n++
			most = max(most, r.d)
		}
	}
	lost := 0
	for _, at := range p.sent {
		if !at.Before(from) && at.Before(to) {
			lost++
		}
	}
	return most, n, lost
}

// TestMeasureClaimPause measures how long a surviving node stalls while it
// claims a crashed node's users: three nodes on one Redis, two of them
// Hubs over loopback WebSockets with clients in the crashed node's users'
// channel and watching some of them, and a prober on each pinging every
// 10 ms. It reports the longest pong during the claim, the claim's
// duration and any user made offline twice or never. The crashed node
// holds PRESENCED_MEASURE_USERS users (15000). It takes a minute and more,
// so it runs only with PRESENCED_MEASURE=1; PRESENCED_MEASURE_PROFILE=file
// writes a CPU profile of the claim.
func TestMeasureClaimPause(t *testing.T) {
	if os.Getenv("PRESENCED_MEASURE") == "" {
		t.Skip("set PRESENCED_MEASURE=1 to measure the pause of a claim (takes a minute and more)")
	}
	users := 15_000
	if s := os.Getenv("PRESENCED_MEASURE_USERS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		users = n
	}
	const watched = 100
	observers := 50 // on b; on a, PRESENCED_MEASURE_OBSERVERS
	many := observers
	if s := os.Getenv("PRESENCED_MEASURE_OBSERVERS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		many = n
	}
	srv := startRedis(t)
	admin := srv.client(t)
	ctx := context.Background()
	var rounds roundLog
	batch := 0 // the default
	if s := os.Getenv("PRESENCED_MEASURE_BATCH"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		batch = n
	}
	cfg := func(name string) Config {
		c := redis.NewClient(&redis.Options{Addr: srv.addr()})
		t.Cleanup(func() { _ = c.Close() })
		return Config{Client: c, Node: name, Prefix: "m", Timeout: 3 * time.Second, RenewEvery: time.Second,
			ClaimEvery: 500 * time.Millisecond, Batch: batch, Logger: slog.New(&rounds)}
	}
	var mu sync.Mutex
	offline := map[string]int{}
	var first, last time.Time
	onPresence := func(uid string, online bool) {
		if online || !strings.HasPrefix(uid, "v") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		last = now
		offline[uid]++
	}
	var survivors []*Engine
	var probers []*prober
	for _, name := range []string{"a", "b"} {
		hs, e, _ := startHubConfig(t, cfg(name), transport.Config{Slots: 31, Tick: 4 * time.Second,
			FrameRate: 1000, FrameBurst: 1000, OnPresence: onPresence}, nil)
		survivors = append(survivors, e)
		base := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws?"
		// Clients in the crashed node's users' channel, each hearing of
		// its members, and watching some of them; their frames drained.
		var uids []string
		for i := range watched {
			uids = append(uids, "v"+strconv.Itoa(i*users/watched))
		}
		list, err := json.Marshal(uids)
		require.NoError(t, err)
		n := observers
		if name == "a" {
			n = many
		}
		var dials sync.WaitGroup
		var dialMu sync.Mutex
		var dialErr error
		for w := range 8 {
			dials.Go(func() {
				for i := w; i < n; i += 8 {
					ws, resp, err := websocket.DefaultDialer.Dial(base+"channels=lobby&uid="+name+"o"+strconv.Itoa(i), nil)
					if err == nil {
						resp.Body.Close()
						err = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"watch","uids":`+string(list)+`}`))
					}
					if err != nil {
						dialMu.Lock()
						dialErr = err
						dialMu.Unlock()
						return
					}
					t.Cleanup(func() { ws.Close() })
					go func() {
						for {
							if _, _, err := ws.ReadMessage(); err != nil {
								return
							}
						}
					}()
				}
			})
		}
		dials.Wait()
		require.NoError(t, dialErr)
		probers = append(probers, startProber(t, base+"uid="+name+"prober"))
	}
	victim := startNode(t, cfg("v"))
	for i := range users {
		uid := "v" + strconv.Itoa(i)
		victim.SetUser(uid, 1, 0)
		victim.SetMember("lobby", uid, 1, false)
		victim.SetMember("room"+strconv.Itoa(i%100), uid, 1, false)
	}
	count := 0
	victim.rec.waitFor(t, 2*time.Minute, "the crashed node's users online", func() bool {
		var err error
		count, _, err = survivors[0].Users(ctx, 0)
		return err == nil && count >= users && testutil.ToFloat64(victim.m.pending) == 0
	})
	t.Logf("%d users online (%d on the survivors)", count, count-users)
	time.Sleep(3 * time.Second) // the last edges reach the survivors' views and clients
	require.NoError(t, admin.ConfigSet(ctx, "slowlog-log-slower-than", "5000").Err())
	require.NoError(t, admin.SlowLogReset(ctx).Err())

	if path := os.Getenv("PRESENCED_MEASURE_PROFILE"); path != "" {
		f, err := os.Create(path)
		require.NoError(t, err)
		require.NoError(t, pprof.StartCPUProfile(f))
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	crashed := time.Now()
	victim.crash()
	victim.stopRun()
	victim.rec.waitFor(t, 2*time.Minute, "every user of the crashed node offline", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(offline) == users
	})
	time.Sleep(time.Second) // late duplicates, and the pongs after the claim
	for _, p := range probers {
		p.close()
	}
	mu.Lock()
	dups := 0
	for _, n := range offline {
		dups += n - 1
	}
	mu.Unlock()
	require.Equal(t, 0, dups, "users made offline more than once")
	t.Logf("%d users of a crashed node claimed by 2 survivors (a with %d clients in their channel, b with %d): crash to first offline %v, first to last offline (the claim) %v, duplicates %d",
		users, many, observers, first.Sub(crashed).Round(time.Millisecond), last.Sub(first).Round(time.Millisecond), dups)
	for i, p := range probers {
		before, nb, _ := p.longest(crashed.Add(-2*time.Second), first.Add(-200*time.Millisecond))
		during, nd, lost := p.longest(first.Add(-200*time.Millisecond), last.Add(200*time.Millisecond))
		t.Logf("node %s: longest pong before the claim %v (%d pings), during it %v (%d pings, %d unanswered)",
			[]string{"a", "b"}[i], before.Round(time.Millisecond), nb, during.Round(time.Millisecond), nd, lost)
	}
	rounds.report(t, crashed)
	slow, err := admin.SlowLogGet(ctx, 128).Result()
	require.NoError(t, err)
	var lines []string
	for _, s := range slow {
		name := ""
		if len(s.Args) > 0 {
			name = s.Args[0]
		}
		lines = append(lines, fmt.Sprintf("%s %v", name, s.Duration.Round(100*time.Microsecond)))
	}
	t.Logf("Redis calls over 5 ms since the crash: %d: %s", len(slow), strings.Join(lines, ", "))
}

// roundLog is a slog handler that keeps the engines' log lines, with when
// they came.
type roundLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *roundLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *roundLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *roundLog) WithGroup(string) slog.Handler            { return l }
func (l *roundLog) Handle(_ context.Context, r slog.Record) error {
	line := r.Time.Format("15:04:05.000") + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

// report logs the claim's rounds since from.
func (l *roundLog) report(t *testing.T, from time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, "claim round") && !strings.Contains(line, "edges=0") {
			out = append(out, line)
		}
	}
	t.Logf("claim rounds since %s:\n%s", from.Format("15:04:05.000"), strings.Join(out, "\n"))
}
