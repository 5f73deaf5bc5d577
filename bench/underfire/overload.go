package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// burst: 400 heartbeat users expire in one step while 20 readers watch them.
func burst(r *run) ([]row, error) {
	const readers, users = 20, 400
	p, err := r.startPresenced("burst", "-slots", "11", "-tick", "200ms", "-max-message", "16384")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	hb := ids("hb-", users)
	cs, ws, err := watchers(p.Addr, "reader-", readers, "channels=lobby", hb)
	if err != nil {
		return nil, err
	}
	defer closeAll(cs)

	start := time.Now()
	failed := heartbeats(p.http(), 0, users, 16, func(i int) string { return "channels=lobby&uid=" + hb[i] })
	span := time.Since(start)
	allOnline := waitFor(5*time.Second, func() bool {
		for _, w := range ws {
			if w.online.Load() != users {
				return false
			}
		}
		return true
	})
	// The timeout is 2 s: every lease ends in one step about then.
	allOffline := waitFor(8*time.Second, func() bool {
		for i, w := range ws {
			if w.offline.Load() < users && !cs[i].isEnded() {
				return false
			}
		}
		return true
	})
	offlineAt := time.Since(start)
	time.Sleep(time.Second)
	closed, how := tally(cs)
	maxStatus := int64(0)
	for _, w := range ws {
		maxStatus = max(maxStatus, w.statuses.Load())
	}
	m := metrics(p.http())
	r.figures("burst", "%d readers, %d heartbeat users posted in %v (%d failed); all seen online %v, all offline %v at %v; "+
		"readers closed: %d (%s); most status frames per reader %d; server closes: %s",
		readers, users, span.Round(time.Millisecond), failed, allOnline, allOffline, offlineAt.Round(time.Millisecond),
		closed, how, maxStatus, closesByReason(m))
	after := fmt.Sprintf("%d of %d closed", closed, readers)
	if closed > 0 {
		after += " (" + how + ")"
	}
	return []row{{
		"1. burst: 400 heartbeat users expire in one step, 20 readers watching them",
		after,
		fmt.Sprintf("`-slots 11 -tick 200ms -max-message 16384`; 20 clients in `lobby` watching the 400 IDs; 400 POST /api/heartbeat?channels=lobby in %v; closes counted 1 s after every reader saw 400 offline", span.Round(time.Millisecond)),
	}}, nil
}

// flood: one client writes chat for 3 s without reading while 12 others read.
func flood(r *run) ([]row, error) {
	const readers = 12
	p, err := r.startPresenced("flood")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	var fromFlooder [readers]atomic.Int64
	var hellos [readers]atomic.Int64
	cs := make([]*client, readers)
	defer closeAll(cs)
	for i := range readers {
		c, err := connect(p.Addr, fmt.Sprintf("reader-%02d", i), "channels=lobby", func(f *frame, raw []byte) {
			if f.Type != "chat" {
				return
			}
			if f.From == "flooder" {
				fromFlooder[i].Add(1)
			} else if strings.Contains(string(raw), "hello") {
				hellos[i].Add(1)
			}
		})
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		cs[i] = c
	}
	fl, _, err := dial(p.Addr, "uid=flooder&channels=lobby", nil)
	if err != nil {
		return nil, fmt.Errorf("dial flooder: %w", err)
	}
	defer fl.Close()
	time.Sleep(200 * time.Millisecond)

	msg := []byte(`{"type":"chat","channel":"lobby","text":"` + strings.Repeat("spam ", 10) + `"}`)
	start := time.Now()
	end := start.Add(3 * time.Second)
	fl.SetWriteDeadline(end)
	written := 0
	var werr error
	for time.Now().Before(end) {
		if werr = fl.WriteMessage(websocket.TextMessage, msg); werr != nil {
			break
		}
		written++
	}
	wrote := time.Since(start)
	closedIn3s, how3s := tally(cs)
	// How the flooder ended: what it reads now, after its unread frames.
	fl.SetReadDeadline(time.Now().Add(5 * time.Second))
	var rerr error
	for rerr == nil {
		_, _, rerr = fl.ReadMessage()
	}
	writeEnd := "none within 3 s"
	if werr != nil && !errors.Is(werr, os.ErrDeadlineExceeded) {
		writeEnd = fmt.Sprintf("%s after %v", endKind(werr), wrote.Round(time.Millisecond))
	}
	// The others chat on.
	time.Sleep(500 * time.Millisecond)
	for i, c := range cs {
		if !c.isEnded() {
			c.send(fmt.Sprintf(`{"type":"chat","channel":"lobby","text":"hello from %d"}`, i))
		}
	}
	waitFor(3*time.Second, func() bool {
		for i := range cs {
			if hellos[i].Load() < readers {
				return false
			}
		}
		return true
	})
	closed, how := tally(cs)
	lo, hi := int64(1<<62), int64(0)
	helloMin := int64(1 << 62)
	for i := range readers {
		lo, hi = min(lo, fromFlooder[i].Load()), max(hi, fromFlooder[i].Load())
		helloMin = min(helloMin, hellos[i].Load())
	}
	m := metrics(p.http())
	r.figures("flood", "flooder wrote %d frames (%d B each) in %v, its write side ended: %s; it then read: %s; "+
		"chats of the flooder delivered per reader %d..%d; readers closed within 3 s: %d (%s), at the end %d (%s); "+
		"each reader then got %d of %d hellos; server closes: %s",
		written, len(msg), wrote.Round(time.Millisecond), writeEnd, endDetail(rerr), lo, hi,
		closedIn3s, how3s, closed, how, helloMin, readers, closesByReason(m))
	return []row{{
		"2. flood: one client writes chat without reading for 3 s, 12 others read",
		fmt.Sprintf("%d of 12 closed; %d of the flooder's %d chats delivered (to each reader); the flooder: close %s (write side: %s)",
			closedIn3s, hi, written, endDetail(rerr), writeEnd),
		"default flags (50 frames/s, bursts of 100); 13 clients in `lobby`; chats from the flooder counted at each reader; then every reader chats once and gets all 12",
	}}, nil
}

// freezeCase: the server is stopped for longer than its timeout while 50
// clients keep pinging it and one stays silent.
func freezeCase(r *run) ([]row, error) {
	const pinging = 50
	p, err := r.startPresenced("freeze") // 31 slots x 1 s: a 30 s timeout
	if err != nil {
		return nil, err
	}
	defer p.stop()
	cs := make([]*client, pinging)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait(); closeAll(cs) }()
	for i := range pinging {
		c, err := connect(p.Addr, fmt.Sprintf("live-%02d", i), "", nil)
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		cs[i] = c
		wg.Go(func() { keepPinging(c, 5*time.Second, stop) })
	}
	silentWS, _, err := dial(p.Addr, "uid=silent", nil)
	if err != nil {
		return nil, fmt.Errorf("dial silent: %w", err)
	}
	silent := &client{uid: "silent", ws: silentWS, ended: make(chan struct{})}
	silentWS.SetPingHandler(func(string) error { return nil }) // never answers
	go silent.read()
	defer silent.close()

	time.Sleep(2 * time.Second)
	progress("freeze: SIGSTOP for %v", r.freeze)
	p.freeze()
	time.Sleep(r.freeze)
	p.thaw()
	resumed := time.Now()
	progress("freeze: SIGCONT")
	time.Sleep(10 * time.Second)
	select {
	case <-silent.ended:
	case <-time.After(30 * time.Second):
	}
	closed, how := tally(cs)
	silentEnd := "not closed 40 s after the resume"
	if silent.isEnded() {
		silentEnd = fmt.Sprintf("%s, %v after the resume", endDetail(silent.endErr), silent.endedAt.Sub(resumed).Round(time.Millisecond))
	}
	m := metrics(p.http())
	r.figures("freeze", "%d pinging clients, stopped %v: closed %d (%s); silent client: %s; server closes: %s; connections now %g",
		pinging, r.freeze, closed, how, silentEnd, closesByReason(m), m["presenced_connections"])
	return []row{{
		"3. freeze: server SIGSTOPped 40 s (timeout 30 s), 50 clients pinging every 5 s",
		fmt.Sprintf("%d of 50 closed; the silent client: %s", closed, silentEnd),
		"default `-slots 31 -tick 1s`; clients send `{\"type\":\"ping\"}` every 5 s and answer pings; SIGSTOP, 40 s, SIGCONT, 10 s; plus one client that never sends nor answers pings",
	}}, nil
}

// keepPinging sends an application ping on c every period until stop, or
// until c ends or a send fails.
func keepPinging(c *client, period time.Duration, stop <-chan struct{}) {
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-c.ended:
			return
		case <-tk.C:
			if c.send(`{"type":"ping"}`) != nil {
				return
			}
		}
	}
}

// cutCase is one case of cut: flooders connections, each sending app pings
// at rate frames a second, which the server should all close within target.
type cutCase struct {
	name     string // of the presenced log and the figures line
	rate     int    // frames a second per flooder
	flooders int
	target   time.Duration
}

// cutResult is what one cut case measured.
type cutResult struct {
	closeIn []time.Duration // first frame to close frame, of the flooders the server closed
	within  int             // flooders closed within the case's target
	how     string          // the flooders' ends, by how
	sent    int             // frames the flooders sent, in all
	cpu     float64         // the server's CPU-seconds from the first frame to the last close
	attack  time.Duration   // first frame to the last close, or to the end of sending
	calm    string          // how the well-behaved client ended, or "connected"
	pongs   int64           // pongs the well-behaved client got
}

// cut: ten clients send app pings far over the frame rate while an
// eleventh pings once a second; the server should cut the ten off with
// 1008 and keep the eleventh.
func cut(r *run) ([]row, error) {
	fast := cutCase{name: "cut-20x", rate: 1000, flooders: 10, target: 3 * time.Second}
	slow := cutCase{name: "cut-2x", rate: 100, flooders: 10, target: 10 * time.Second}
	f, err := r.cutOnce(fast)
	if err != nil {
		return nil, err
	}
	s, err := r.cutOnce(slow)
	if err != nil {
		return nil, err
	}
	how := "default flags (50 frames/s, bursts of 100); ten connections `?uid=flood-N` each send `{\"type\":\"ping\"}` paced in 10 ms batches for at most 10 s, " +
		"each timed from its first frame to the close frame it reads; server CPU is utime+stime of /proc/<pid>/stat from the first frame to the last close; " +
		"an eleventh client pings once a second from 1 s before to 2 s after"
	return []row{
		{"11a. cut: 10 clients send pings at 1,000 frames/s each (20x the rate), one more pings once a second",
			f.outcome(fast) + fmt.Sprintf("; server CPU %.2f s (target < 1: %s)", f.cpu, met(f.cpu < 1)), how},
		{"11b. cut: 10 clients send pings at 100 frames/s each (2x the rate), one more pings once a second",
			s.outcome(slow) + fmt.Sprintf("; server CPU %.2f s", s.cpu), how},
	}, nil
}

// cutOnce runs cc on a fresh presenced with default flags.
func (r *run) cutOnce(cc cutCase) (cutResult, error) {
	var res cutResult
	p, err := r.startPresenced(cc.name)
	if err != nil {
		return res, err
	}
	defer p.stop()
	var pongs atomic.Int64
	calm, err := connect(p.Addr, "calm", "", func(f *frame, _ []byte) {
		if f.Type == "pong" {
			pongs.Add(1)
		}
	})
	if err != nil {
		return res, fmt.Errorf("dial calm: %w", err)
	}
	defer calm.close()
	stop := make(chan struct{})
	var pinging sync.WaitGroup
	pinging.Go(func() { keepPinging(calm, time.Second, stop) })
	defer func() { close(stop); pinging.Wait() }()

	cs := make([]*client, cc.flooders)
	defer closeAll(cs)
	for i := range cs {
		c, err := connect(p.Addr, fmt.Sprintf("flood-%d", i), "", nil)
		if err != nil {
			return res, fmt.Errorf("dial flood-%d: %w", i, err)
		}
		cs[i] = c
	}
	time.Sleep(1100 * time.Millisecond) // the calm client pings once before

	pid := p.Cmd.Process.Pid
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		return res, err
	}
	start := time.Now()
	sent := make([]int, len(cs))
	first := make([]time.Time, len(cs))
	var senders sync.WaitGroup
	for i, c := range cs {
		senders.Go(func() { sent[i], first[i] = pace(c, cc.rate, 10*time.Second) })
	}
	senders.Wait()
	res.attack = time.Since(start)
	cpu1, err := cpuSeconds(pid)
	if err != nil {
		return res, err
	}
	res.cpu = cpu1 - cpu0
	// A close frame may still be on its way to a sender that stopped at 10 s.
	waitFor(time.Second, func() bool {
		for _, c := range cs {
			if !c.isEnded() {
				return false
			}
		}
		return true
	})
	_, res.how = tally(cs)
	for i, c := range cs {
		res.sent += sent[i]
		if !c.isEnded() {
			continue
		}
		d := c.endedAt.Sub(first[i])
		res.closeIn = append(res.closeIn, d)
		if d <= cc.target {
			res.within++
		}
	}
	// The calm client pings on for 2 s after the attack, while the server
	// idles but for it: its CPU then is the floor under res.cpu.
	time.Sleep(2 * time.Second)
	cpu2, err := cpuSeconds(pid)
	if err != nil {
		return res, err
	}
	idle := (cpu2 - cpu1) / time.Since(start.Add(res.attack)).Seconds()
	res.calm, res.pongs = "connected", pongs.Load()
	if calm.isEnded() {
		res.calm = "closed: " + endDetail(calm.endErr)
	}
	r.figures(cc.name, "%d flooders at %d frames/s sent %d frames; closed %d (%s), %d within %v; first frame to close %s; "+
		"attack %v, server CPU %.3f s (%.3f CPU-s/s after it); calm client: %s, %d pongs; server closes: %s",
		cc.flooders, cc.rate, res.sent, len(res.closeIn), res.how, res.within, cc.target, spread(res.closeIn),
		res.attack.Round(time.Millisecond), res.cpu, idle, res.calm, res.pongs, closesByReason(metrics(p.http())))
	return res, nil
}

// outcome is the table cell of res, without the CPU.
func (res cutResult) outcome(cc cutCase) string {
	s := fmt.Sprintf("%d of %d closed within %v (target: all, %s)", res.within, cc.flooders, cc.target, met(res.within == cc.flooders))
	if len(res.closeIn) > 0 {
		s += fmt.Sprintf(", %s; first frame to close %s", res.how, spread(res.closeIn))
	}
	return s + fmt.Sprintf("; the calm client: %s, %d pongs", res.calm, res.pongs)
}

// pace sends {"type":"ping"} on c at rate frames a second, in batches every
// 10 ms, until c ends, a send fails or d passes. It returns the frames sent
// and when the first was.
func pace(c *client, rate int, d time.Duration) (sent int, first time.Time) {
	const ping = `{"type":"ping"}`
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	first = time.Now()
	for {
		elapsed := time.Since(first)
		if elapsed >= d {
			return sent, first
		}
		for due := int(elapsed.Seconds()*float64(rate)) + 1; sent < due; sent++ {
			if c.send(ping) != nil {
				return sent, first
			}
		}
		select {
		case <-c.ended:
			return sent, first
		case <-tk.C:
		}
	}
}

// spread is the median of ds and its range, in seconds; "none" if empty.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Sorted(slices.Values(ds))
	med := (s[(len(s)-1)/2] + s[len(s)/2]) / 2
	return fmt.Sprintf("median %.2f s (%.2f..%.2f)", med.Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
