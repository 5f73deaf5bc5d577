package cluster

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
