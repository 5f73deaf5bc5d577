package transport

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A burst posted faster than tasks finish runs on at most max workers, in
// the order posted once queued, and every task runs.
func TestWorkersQueueABurstBeyondMax(t *testing.T) {
	for _, limit := range []int{1, 4} {
		p := newWorkers()
		p.max, p.maxIdle, p.stallAfter = limit, limit, time.Hour // no rescue
		const n = 5000
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			order []int
			peak  int // goroutines running tasks, idle or not
		)
		wg.Add(n)
		for i := range n {
			p.do(func() {
				defer wg.Done()
				p.mu.Lock()
				running := p.running
				p.mu.Unlock()
				mu.Lock()
				peak = max(peak, running)
				order = append(order, i)
				mu.Unlock()
			})
		}
		wg.Wait()
		assert.Equal(t, limit, peak, "a burst of %d uses all %d workers and no more", n, limit)
		require.Len(t, order, n)
		if limit == 1 {
			for i, v := range order {
				require.Equal(t, i, v, "one worker runs the tasks in the order posted")
			}
		}
		p.mu.Lock()
		assert.LessOrEqual(t, p.running, limit)
		assert.Equal(t, p.head, len(p.queue), "queue drained")
		p.mu.Unlock()
	}
}

// Tasks queued behind workers that block get workers of their own.
func TestWorkersRescueAQueueBehindBlockedTasks(t *testing.T) {
	p := newWorkers()
	p.max, p.maxIdle = 2, 2
	release := make(chan struct{})
	defer close(release)
	for range 2 {
		p.do(func() { <-release })
	}
	ran := make(chan int, 3)
	for i := range 3 {
		p.do(func() { ran <- i })
	}
	got := map[int]bool{}
	deadline := time.After(30 * time.Second)
	for len(got) < 3 {
		select {
		case i := <-ran:
			got[i] = true
		case <-deadline:
			t.Fatalf("queued tasks still waiting behind blocked workers: ran %v", got)
		}
	}
}

// Tasks that keep finishing, but slowly, get more workers once the oldest
// queued has waited slowAfter.
func TestWorkersGrowBehindSlowTasks(t *testing.T) {
	p := newWorkers()
	p.max, p.maxIdle, p.slowAfter = 1, 1, 50*time.Millisecond
	const n = 200
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		peak int
	)
	wg.Add(n)
	for range n {
		p.do(func() {
			defer wg.Done()
			time.Sleep(2 * time.Millisecond) // a slow OnMessage
			p.mu.Lock()
			running := p.running
			p.mu.Unlock()
			mu.Lock()
			peak = max(peak, running)
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Greater(t, peak, 1, "400 ms of queued work ran on one worker")
}
