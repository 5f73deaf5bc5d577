package transport

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// workerIdle is how long an idle worker waits for another task before it
// exits.
const workerIdle = 2 * time.Second

// workers runs short tasks (reading a polled socket's frames, writing a
// connection's queue) on goroutines that outlive them: a goroutine new for
// every task grows a fresh stack each time, by copying, which costs more
// than the task. The most recently idle worker takes the next task, so the
// ones a burst left over starve and exit after workerIdle. Up to maxIdle
// wait: with 8 per core, most tasks of the bursts that clients pinging on
// a common period bring every second started a goroutine and grew its
// stack (12% of the CPU at 5,000 connections); every idle worker keeps a
// stack, so the cap trades that CPU for memory.
type workers struct {
	mu      sync.Mutex
	idle    []*worker // most recently idle last
	maxIdle int
}

type worker struct {
	task chan func() // buffered: a task handed over never blocks do
}

func newWorkers() *workers { return &workers{maxIdle: 64 * runtime.GOMAXPROCS(0)} }

// liveWorkers counts the workers of every Hub in the process, for tests
// that measure what idle connections cost without them.
var liveWorkers atomic.Int64

// do runs f on an idle worker, or on a new one if none is waiting.
func (p *workers) do(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.task <- f
		return
	}
	p.mu.Unlock()
	go p.work(f)
}

func (p *workers) work(f func()) {
	liveWorkers.Add(1)
	defer liveWorkers.Add(-1)
	w := &worker{task: make(chan func(), 1)}
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		p.mu.Lock()
		if len(p.idle) >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		t.Reset(workerIdle)
		select {
		case f = <-w.task:
		case <-t.C:
			p.mu.Lock()
			i := slices.Index(p.idle, w)
			if i >= 0 {
				p.idle = slices.Delete(p.idle, i, i+1)
			}
			p.mu.Unlock()
			if i >= 0 {
				return
			}
			f = <-w.task // do took w off the list: its task is on the way
		}
	}
}
