package queue_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/queue"
)

// drainer starts Drain on a goroutine whenever a push asks for one, as the
// asynchronous users do, and records what it is handed.
type drainer struct {
	q    *queue.Queue[int]
	mu   sync.Mutex
	got  []int
	hold chan struct{} // when set, each item waits for a receive
	wg   sync.WaitGroup
}

func (d *drainer) handle(v int) {
	if d.hold != nil {
		<-d.hold
	}
	d.mu.Lock()
	d.got = append(d.got, v)
	d.mu.Unlock()
}

func (d *drainer) start(start bool) {
	if start {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.q.Drain(d.handle)
		}()
	}
}

func (d *drainer) push(t *testing.T, v int) {
	start, err := d.q.Push(v)
	require.NoError(t, err)
	d.start(start)
}

func (d *drainer) seen() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.got...)
}

func TestItemsAreHandedOverInOrder(t *testing.T) {
	d := &drainer{q: new(queue.Queue[int])}
	want := make([]int, 0, 10000)
	for i := range 10000 {
		d.push(t, i)
		want = append(want, i)
	}
	d.wg.Wait()
	assert.Equal(t, want, d.seen())
	assert.Zero(t, d.q.Len())
}

func TestOnlyTheFirstPushOfABurstAsksForADrainer(t *testing.T) {
	q := new(queue.Queue[int])
	var starts int
	for i := range 5 {
		start, err := q.Push(i)
		require.NoError(t, err)
		if start {
			starts++
		}
	}
	assert.Equal(t, 1, starts, "one drainer takes the whole burst")
	var got []int
	q.Drain(func(v int) { got = append(got, v) })
	assert.Equal(t, []int{0, 1, 2, 3, 4}, got)
	start, err := q.Push(5)
	require.NoError(t, err)
	assert.True(t, start, "a drained queue asks for a drainer again")
}

func TestPushIsRefusedPastTheLimitAndAppendIsNot(t *testing.T) {
	q := &queue.Queue[int]{Limit: 2}
	for i := range 2 {
		_, err := q.Push(i)
		require.NoError(t, err)
	}
	_, err := q.Push(2)
	assert.ErrorIs(t, err, queue.ErrFull)
	_, err = q.Append(3)
	assert.NoError(t, err, "Append goes past the limit")
	var got []int
	q.Drain(func(v int) { got = append(got, v) })
	assert.Equal(t, []int{0, 1, 3}, got)
	_, err = q.Push(4)
	assert.NoError(t, err, "room again once drained")
}

func TestCloseWhileWaitingDrainsWhatCameBeforeThenTheFinalItem(t *testing.T) {
	d := &drainer{q: &queue.Queue[int]{Limit: 3}, hold: make(chan struct{})}
	for i := range 3 {
		d.push(t, i)
	}
	// The drainer holds item 0; 1 and 2 wait, and the queue is full.
	d.start(d.q.Close(-1))
	assert.True(t, d.q.Closed())
	_, err := d.q.Push(9)
	assert.ErrorIs(t, err, queue.ErrClosed)
	_, err = d.q.Append(9)
	assert.ErrorIs(t, err, queue.ErrClosed)
	d.start(d.q.Close(-2)) // a second Close still queues its final item
	close(d.hold)
	d.wg.Wait()
	assert.Equal(t, []int{0, 1, 2, -1, -2}, d.seen())
}

func TestCloseOfAnIdleQueueAsksForADrainer(t *testing.T) {
	q := new(queue.Queue[int])
	require.True(t, q.Close(7))
	var got []int
	q.Drain(func(v int) { got = append(got, v) })
	assert.Equal(t, []int{7}, got)
}

func TestClaimLetsTheCallerWorkAndDrainHandsItWhatCameMeanwhile(t *testing.T) {
	q := new(queue.Queue[int])
	require.True(t, q.Claim())
	assert.False(t, q.Claim(), "one claimer at a time")
	start, err := q.Push(1) // say, a close while the claimer works
	require.NoError(t, err)
	assert.False(t, start, "the claimer drains it")
	var got []int
	q.Drain(func(v int) { got = append(got, v) })
	assert.Equal(t, []int{1}, got)
	assert.True(t, q.Claim(), "the claim was released")
	q.Drain(func(int) { t.Fatal("nothing waits") })

	_, err = q.Push(2)
	require.NoError(t, err)
	assert.False(t, q.Claim(), "items wait: they go first")
}

func TestFlushReturnsOnceEverythingBeforeItWasHandled(t *testing.T) {
	q := new(queue.Queue[int])
	var mu sync.Mutex
	var got []int
	handled := map[int]bool{}
	handle := func(v int) {
		mu.Lock()
		got = append(got, v)
		handled[v] = true
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				v := g*1000 + i
				_, err := q.Push(v)
				assert.NoError(t, err)
				q.Flush(handle)
				mu.Lock()
				assert.True(t, handled[v], "Flush returned before its item was handled")
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Len(t, got, 8*500)
	// Each producer's items came in its order.
	last := map[int]int{}
	for _, v := range got {
		g, i := v/1000, v%1000
		if prev, ok := last[g]; ok {
			assert.Greater(t, i, prev)
		}
		last[g] = i
	}
}

func TestFlushWaitsForTheDrainerAtWork(t *testing.T) {
	q := new(queue.Queue[int])
	release := make(chan struct{})
	var handled []int
	var mu sync.Mutex
	handle := func(v int) {
		if v == 0 {
			<-release
		}
		mu.Lock()
		handled = append(handled, v)
		mu.Unlock()
	}
	_, err := q.Push(0)
	require.NoError(t, err)
	go q.Flush(handle) // holds item 0
	require.Eventually(t, func() bool { return q.Len() == 0 }, 10*time.Second, time.Millisecond)
	_, err = q.Push(1)
	require.NoError(t, err)
	flushed := make(chan struct{})
	go func() {
		q.Flush(handle) // the drainer at work stops at item 0, its own: this call hands item 1 over
		close(flushed)
	}()
	select {
	case <-flushed:
		t.Fatal("Flush returned while item 0 was held")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("Flush never returned")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{0, 1}, handled)
}

func TestAnIdleQueueHoldsNoGoroutineAndNoArray(t *testing.T) {
	if lockorder.Enabled {
		t.Skip("checking the lock order allocates")
	}
	before := runtime.NumGoroutine()
	qs := make([]queue.Queue[int], 1000)
	for i := range qs {
		start, err := qs[i].Push(i)
		require.NoError(t, err)
		require.True(t, start)
		qs[i].Drain(func(int) {})
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "a queue starts no goroutine")
	allocs := testing.AllocsPerRun(100, func() {
		qs[0].Claim()
		qs[0].Drain(func(int) {})
	})
	assert.Zero(t, allocs, "claiming an idle queue allocates nothing")
}
