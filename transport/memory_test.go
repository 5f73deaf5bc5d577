package transport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// recorder is a Relay that records what it is given, in order.
type recorder chan string

func (r recorder) PresenceChanged(uid string, online bool) { r <- fmt.Sprintf("%s:%v", uid, online) }
func (r recorder) Broadcast(msg []byte)                    { r <- string(msg) }

func (r recorder) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-r:
			require.Equal(t, w, got)
		case <-time.After(waitLong):
			require.FailNow(t, "nothing relayed", "want %s", w)
		}
	}
}

func runEngine(t *testing.T, e transport.Engine) recorder {
	t.Helper()
	rec := make(recorder, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, rec) }()
	t.Cleanup(func() {
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
	})
	return rec
}

func TestMemoryEngineEdgesAndMessagesInOrder(t *testing.T) {
	e := transport.NewMemoryEngine()
	rec := runEngine(t, e)
	ctx := context.Background()

	e.SetLocal("bob", 1)
	e.SetLocal("bob", 3) // no edge
	require.NoError(t, e.Publish(ctx, []byte("m1")))
	e.SetLocal("alice", 1)
	e.SetLocal("bob", 0)
	e.SetLocal("bob", 0) // no edge
	require.NoError(t, e.Publish(ctx, []byte("m2")))
	rec.expect(t, "bob:true", "m1", "alice:true", "bob:false", "m2")

	n, err := e.Lookup(ctx, "alice")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	n, err = e.Lookup(ctx, "bob")
	require.NoError(t, err)
	assert.Equal(t, 0, n)
	require.NoError(t, e.Health(ctx))
}

func TestMemoryEngineUsers(t *testing.T) {
	e := transport.NewMemoryEngine()
	for _, u := range []string{"d", "b", "a", "c"} {
		e.SetLocal(u, 2)
	}
	e.SetLocal("c", 0)
	for _, tc := range []struct {
		limit int
		want  []string
	}{
		{-1, []string{}},
		{0, []string{}},
		{2, []string{"a", "b"}},
		{10, []string{"a", "b", "d"}},
	} {
		count, users, err := e.Users(context.Background(), tc.limit)
		require.NoError(t, err)
		assert.Equal(t, 3, count)
		assert.Equal(t, tc.want, users, "limit %d", tc.limit)
	}
}

// Publish waits for room once its queue is full and gives up with ctx;
// SetLocal never waits.
func TestMemoryEnginePublishIsBounded(t *testing.T) {
	e := transport.NewMemoryEngine()
	ctx := context.Background()
	n := 0
	for ; n < 100000; n++ {
		c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := e.Publish(c, []byte("m"))
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			break
		}
	}
	assert.Less(t, n, 100000, "the queue is bounded")
	e.SetLocal("x", 1) // does not block on the full queue

	rec := runEngine(t, e)
	for i := 0; i < n; i++ {
		rec.expect(t, "m")
	}
	rec.expect(t, "x:true")
	require.NoError(t, e.Publish(ctx, []byte("after")), "room again once Run took the queue")
	rec.expect(t, "after")
}

func TestMemoryEngineRunsOnce(t *testing.T) {
	e := transport.NewMemoryEngine()
	rec := runEngine(t, e)
	require.NoError(t, e.Publish(context.Background(), []byte("m")))
	rec.expect(t, "m") // the first Run is running
	assert.Error(t, e.Run(context.Background(), make(recorder, 1)))
}
