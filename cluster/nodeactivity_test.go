package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// conn is a connection as a presence.Node sees it, with no socket behind it.
type conn struct{}

func (*conn) Send(protocol.Encoded) {}
func (*conn) Probe()                {}
func (*conn) Close(int, string)     {}

// activityLog counts the OnActivity calls of several Nodes.
type activityLog struct {
	mu    sync.Mutex
	calls map[string][]string // node -> "uid away|active", in order
}

func (l *activityLog) on(node string) func(uid string, away bool) {
	return func(uid string, away bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.calls[node] = append(l.calls[node], uid+" "+activityWord(away))
	}
}

func (l *activityLog) all() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for n, cs := range l.calls {
		out[n] = append([]string(nil), cs...)
	}
	return out
}

// startPresenceNode builds a presence.Node on a cluster engine, runs the
// engine and leaves the clock to the test.
func startPresenceNode(t *testing.T, srv *redisServer, name string, onActivity func(string, bool)) (*presence.Node, *Engine) {
	t.Helper()
	e, err := New(testConfig(srv.client(t), name))
	require.NoError(t, err)
	n, err := presence.New(presence.Config{Engine: e, Slots: 61, Tick: time.Second, OnActivity: onActivity})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		e.crash()
		cancel()
		<-done
		n.Close()
	})
	return n, e
}

// Through real Nodes on two cluster engines, each away and active edge of a
// user connected to both reaches OnActivity once, on one of the nodes.
func TestNodesOnActivityOncePerEdge(t *testing.T) {
	srv := startRedis(t)
	log := &activityLog{calls: map[string][]string{}}
	na, ea := startPresenceNode(t, srv, "a", log.on("a"))
	nb, _ := startPresenceNode(t, srv, "b", log.on("b"))
	ctx := context.Background()
	ca, cb := &conn{}, &conn{}
	require.NoError(t, na.Connect(ctx, ca, "alice", []string{"lobby"}))
	require.NoError(t, nb.Connect(ctx, cb, "alice", []string{"lobby"}))
	// wait steps both clocks (which hand the edges to OnActivity) until
	// check holds.
	wait := func(what string, check func(ct *assert.CollectT)) {
		t.Helper()
		eventually(t, what, func(ct *assert.CollectT) {
			na.Step()
			nb.Step()
			check(ct)
		})
	}
	status := func(want presence.UserStatus) func(ct *assert.CollectT) {
		return func(ct *assert.CollectT) {
			st, err := nb.Status(ctx, "alice")
			require.NoError(ct, err)
			assert.Equal(ct, want, st)
		}
	}
	wait("alice online twice", status(presence.UserStatus{Conns: 2}))

	require.NoError(t, na.SetActivity(ca, true))
	wait("a's away counted", func(ct *assert.CollectT) {
		n, err := srv.client(t).HGet(ctx, ea.keys[ea.shard("alice")].tag+":away", "alice").Int()
		assert.NoError(ct, err)
		assert.Equal(ct, 1, n)
	})
	require.NoError(t, nb.SetActivity(cb, true))
	wait("alice away", status(presence.UserStatus{Conns: 2, Away: true}))
	require.NoError(t, na.SetActivity(ca, false))
	wait("alice active, told once each", func(ct *assert.CollectT) {
		calls := log.all()
		assert.Equal(ct, []string{"alice away"}, calls["b"], "b's change made alice away")
		assert.Equal(ct, []string{"alice active"}, calls["a"], "a's change made alice active")
	})
	t.Logf("OnActivity calls: %v", log.all())
}
