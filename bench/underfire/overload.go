package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	cs, ws, err := watchers(p.addr, "reader-", readers, "channels=lobby", hb)
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
		c, err := connect(p.addr, fmt.Sprintf("reader-%02d", i), "channels=lobby", func(f *frame, raw []byte) {
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
	fl, _, err := dial(p.addr, "uid=flooder&channels=lobby", nil)
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
		c, err := connect(p.addr, fmt.Sprintf("live-%02d", i), "", nil)
		if err != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		cs[i] = c
		wg.Go(func() { keepPinging(c, 5*time.Second, stop) })
	}
	silentWS, _, err := dial(p.addr, "uid=silent", nil)
	if err != nil {
		return nil, fmt.Errorf("dial silent: %w", err)
	}
	silent := &client{uid: "silent", ws: silentWS, ended: make(chan struct{})}
	silentWS.SetPingHandler(func(string) error { return nil }) // never answers
	go silent.read()
	defer silent.close()

	time.Sleep(2 * time.Second)
	progress("freeze: SIGSTOP for %v", r.freeze)
	p.signal(syscall.SIGSTOP)
	time.Sleep(r.freeze)
	p.signal(syscall.SIGCONT)
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
