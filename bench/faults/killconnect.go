package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// killed is a run of the kill right after connects: n users connect to
// node A, A is SIGKILLed a drawn 0-50 ms after the last welcome, and the
// other nodes claim it. With a webhook each node keeps its edges in Redis
// until delivered, so every user's online must reach the receiver,
// whether A sent it or its claimer did, and then its offline.
type killed struct {
	seed       uint64
	users      int
	delay      time.Duration // from the last welcome to the SIGKILL
	lastIn     time.Time     // the last welcome
	signal     time.Time     // the SIGKILL sent
	exit       time.Time     // A gone: a POST after it came from another node
	posts      int
	refused    int      // POSTs answered 503
	lateOn     int      // onlines first accepted after the kill: sent by the claimer
	repeatedID int      // events accepted again under an id already seen
	timeline   []string // each POST: when, from the SIGKILL, its answer and its events by type
	problems   []string
}

// maxKillDelay bounds the drawn delay from the last welcome to the kill.
const maxKillDelay = 50 * time.Millisecond

// killAfterConnects runs the kill right after connects with users users,
// each in one channel, on cfg's seed, in the single mode.
func killAfterConnects(ctx context.Context, cfg config, users int) (*killed, error) {
	var (
		mu     sync.Mutex
		in     int
		allIn  = make(chan struct{})
		failed = make(chan error, users)
		conns  sync.WaitGroup
	)
	// Last: the world's stop ends the connections a failed run left open.
	defer conns.Wait()
	cfg.mode = "single"
	w, rc, err := startWorld(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer rc.close()
	defer w.stop()
	if err := waitUntil(ctx, time.Minute, func() bool { return w.allReady(ctx) == nil }); err != nil {
		return nil, fmt.Errorf("nodes not ready: %w", w.allReady(ctx))
	}
	k := &killed{seed: cfg.seed, users: users,
		delay: time.Duration(rand.New(rand.NewPCG(cfg.seed, 5)).Int64N(int64(maxKillDelay) + 1))}

	for i := range users {
		uid, ch := fmt.Sprintf("k%03d", i), channels[i%len(channels)]
		conns.Go(func() {
			ws, err := connect(w.addrs[0], uid, []string{ch})
			if err != nil {
				failed <- err
				return
			}
			defer ws.Close()
			mu.Lock()
			if in++; in == users {
				k.lastIn = time.Now()
				close(allIn)
			}
			mu.Unlock()
			for {
				// Held open, without reconnecting, until the kill ends it.
				if _, _, err := ws.ReadMessage(); err != nil {
					return
				}
			}
		})
	}
	select {
	case <-allIn:
	case err := <-failed:
		return nil, fmt.Errorf("a user did not connect: %w", err)
	case <-time.After(time.Minute):
		mu.Lock()
		defer mu.Unlock()
		return nil, fmt.Errorf("%d of %d users connected within a minute", in, users)
	}
	time.Sleep(time.Until(k.lastIn.Add(k.delay)))
	k.signal = time.Now()
	if err := w.killNode(0, syscall.SIGKILL); err != nil {
		return nil, err
	}
	k.exit = time.Now()
	cfg.logf("seed %d: %d users on A, A killed %v after the last welcome", cfg.seed, users, k.signal.Sub(k.lastIn).Round(time.Millisecond))

	// The claim comes within a few timeouts; a minute is for a busy machine.
	done := func() bool {
		h := &history{posts: rc.log()}
		h.dedupe()
		for i := range users {
			uid := fmt.Sprintf("k%03d", i)
			if !hasOff(h.edges[uid]) || !hasOff(h.edges[uid+"@"+channels[i%len(channels)]]) {
				return false
			}
		}
		return true
	}
	_ = waitUntil(ctx, time.Minute, done)
	_ = waitUntil(ctx, time.Minute, func() bool { return time.Since(rc.lastPost()) > 3*time.Second })
	k.check(rc.log())
	return k, nil
}

func hasOff(es []event) bool {
	return slices.ContainsFunc(es, func(e event) bool { return !isOn(e.Type) })
}

// check reads the receiver's log: each user's edges, de-duplicated by
// event id, are exactly one online then one offline, and each membership's
// one join then one leave.
func (k *killed) check(posts []post) {
	h := &history{posts: posts}
	h.dedupe()
	k.posts, k.refused, k.repeatedID = h.counted.posts, h.counted.refused, h.counted.repeatedIDs
	for _, a := range h.found {
		k.problems = append(k.problems, a.kind+": "+a.what)
	}
	first := map[string]time.Time{} // an online's first acceptance
	for _, p := range posts {
		types := map[string]int{}
		for _, e := range p.events {
			types[e.Type]++
		}
		k.timeline = append(k.timeline, fmt.Sprintf("%+6d ms %s %d %v", p.got.Sub(k.signal).Milliseconds(), p.id, p.status, types))
		for _, e := range p.events {
			if _, ok := first[e.ID]; p.status == 204 && e.Type == "online" && !ok {
				first[e.ID] = p.got
			}
		}
	}
	for _, t := range first {
		if t.After(k.exit) {
			k.lateOn++
		}
	}
	for i := range k.users {
		uid := fmt.Sprintf("k%03d", i)
		ch := channels[i%len(channels)]
		for _, key := range []string{uid, uid + "@" + ch} {
			var got []string
			for _, e := range h.edges[key] {
				got = append(got, e.Type)
			}
			want := []string{"online", "offline"}
			if key != uid {
				want = []string{"join", "leave"}
			}
			if !slices.Equal(got, want) {
				k.problems = append(k.problems, fmt.Sprintf("%s: edges %v, want %v", key, got, want))
			}
		}
	}
}

// String is the run's counts, and its problems, one a line.
func (k *killed) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d users on A, SIGKILL %v after the last welcome (drawn %v); %d POSTs (%d answered 503), %d onlines first delivered after the kill, %d event ids repeated; ",
		k.seed, k.users, k.signal.Sub(k.lastIn).Round(time.Millisecond), k.delay.Round(time.Millisecond), k.posts, k.refused, k.lateOn, k.repeatedID)
	if len(k.problems) == 0 {
		b.WriteString("every online and join once, then one offline and one leave\n")
	} else {
		fmt.Fprintf(&b, "SEED %d: %d problems\n", k.seed, len(k.problems))
	}
	for _, l := range k.timeline {
		b.WriteString("  POST " + l + "\n")
	}
	for i, p := range k.problems {
		if i == maxShown {
			fmt.Fprintf(&b, "... %d more\n", len(k.problems)-maxShown)
			break
		}
		b.WriteString("    " + p + "\n")
	}
	return b.String()
}
