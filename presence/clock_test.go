package presence

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (c *client) closed() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.closes...)
}

// probeCounter is a client that counts its probes.
type probeCounter struct {
	client
	mu     sync.Mutex
	probes int
}

func (p *probeCounter) Probe() {
	p.mu.Lock()
	p.probes++
	p.mu.Unlock()
}

func (p *probeCounter) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes
}

// A connection is probed at half the timeout and closed with 4408 at the
// Slots-th step after its last keepalive; a keepalive starts the count anew.
func TestConnectionsTimeOutOnTheNodesClock(t *testing.T) {
	n := newNode(t, Config{Slots: 5}) // a timeout of 4 ticks
	c := &probeCounter{client: client{name: "alice"}}
	require.NoError(t, n.Connect(context.Background(), c, "alice", nil))
	for range 4 {
		n.Step()
	}
	assert.Empty(t, c.closed(), "alive for Slots-1 steps")
	assert.Equal(t, 1, c.count(), "probed once, at half the timeout")
	n.Touch(c)
	for range 4 {
		n.Step()
	}
	assert.Empty(t, c.closed(), "the keepalive restarted the count")
	n.Step()
	assert.Equal(t, []string{"4408 idle timeout"}, c.closed())
}

func TestTokenExpiryClosesWith4401(t *testing.T) {
	n := newNode(t, Config{Slots: 31, Tick: time.Second})
	c := connect(t, n, "alice")
	n.SetExpiry(c, time.Now().Add(2*time.Second))
	n.Step()
	assert.Empty(t, c.closed())
	n.SetExpiry(c, time.Now().Add(5*time.Second)) // a refresh
	for range 4 {
		n.Step()
	}
	assert.Empty(t, c.closed(), "the refreshed token holds")
	for range 2 {
		n.Step()
	}
	assert.Equal(t, []string{"4401 token expired"}, c.closed())
}

// After a stall a connection that times out gets two more ticks, once.
func TestConnectionsOutliveAStallOnce(t *testing.T) {
	var stalled time.Time
	n := newNode(t, Config{Slots: 3, Tick: time.Second})
	n.stalled = func() time.Time { return stalled }
	c := connect(t, n, "alice")
	n.Step()
	stalled = time.Now()
	n.Step()
	n.Step() // it would time out here
	assert.Empty(t, c.closed())
	n.Step()
	n.Step()
	assert.Empty(t, c.closed(), "two more ticks")
	n.Step()
	assert.Equal(t, []string{"4408 idle timeout"}, c.closed(), "no second reprieve for the same stall")
}

// countingEngine is the memory engine, counting the calls the Node makes.
type countingEngine struct {
	Engine
	mu                sync.Mutex
	follows, unfollow map[Topic]int
}

func newCountingEngine() *countingEngine {
	return &countingEngine{Engine: NewMemoryEngine(), follows: map[Topic]int{}, unfollow: map[Topic]int{}}
}

func (e *countingEngine) Follow(ctx context.Context, topics []Topic) error {
	e.mu.Lock()
	for _, t := range topics {
		e.follows[t]++
	}
	e.mu.Unlock()
	return e.Engine.Follow(ctx, topics)
}

func (e *countingEngine) Unfollow(topics []Topic) {
	e.mu.Lock()
	for _, t := range topics {
		e.unfollow[t]++
	}
	e.mu.Unlock()
	e.Engine.Unfollow(topics)
}

func (e *countingEngine) counts(t Topic) (follows, unfollows int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.follows[t], e.unfollow[t]
}

// The Node counts followers itself and asks the Engine to follow or unfollow
// a topic only when its first follower comes and its last goes.
func TestEngineFollowsOnlyOnFirstAndLast(t *testing.T) {
	e := newCountingEngine()
	n := newNode(t, Config{Engine: e})
	ctx := context.Background()
	lobby, bob := Topic{Channel: "lobby"}, Topic{UID: "bob"}

	a := connect(t, n, "alice", "lobby")
	b := connect(t, n, "alice", "lobby")
	require.NoError(t, n.Join(ctx, a, "lobby"), "joining again")
	require.NoError(t, n.Watch(ctx, a, []string{"bob"}))
	require.NoError(t, n.Watch(ctx, b, []string{"bob", "bob"}))
	f, u := e.counts(lobby)
	assert.Equal(t, [2]int{1, 0}, [2]int{f, u})
	f, u = e.counts(Topic{UID: "alice"})
	assert.Equal(t, [2]int{1, 0}, [2]int{f, u})

	require.NoError(t, n.Leave(a, "lobby"))
	n.Disconnect(a)
	f, u = e.counts(lobby)
	assert.Equal(t, [2]int{1, 0}, [2]int{f, u}, "b still follows")
	n.Disconnect(b)
	for _, topic := range []Topic{lobby, bob, {UID: "alice"}} {
		f, u = e.counts(topic)
		assert.Equal(t, [2]int{1, 1}, [2]int{f, u}, "%+v", topic)
	}

	connect(t, n, "carol", "lobby")
	f, u = e.counts(lobby)
	assert.Equal(t, [2]int{2, 1}, [2]int{f, u}, "followed again")
}

// An Engine that is not the built-in one gets its Relay from New, so the
// edges of the very first connection reach the clients.
func TestAnyEngineDeliversFromTheFirstConnection(t *testing.T) {
	n := newNode(t, Config{Engine: newCountingEngine()})
	obs := connect(t, n, "obs", "lobby")
	assert.Equal(t, []string{`{"type":"joined","channel":"lobby","count":1,"members":["obs"]}`}, obs.take())
	connect(t, n, "alice", "lobby")
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":["alice"],"leaves":[]}`}, obs.take())
	count, members, _, err := n.Members(context.Background(), "lobby", "", 10)
	require.NoError(t, err)
	assert.Equal(t, 2, count)
	assert.Equal(t, []string{"alice", "obs"}, members)
}
