package transport

import (
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/internal/lockorder"
)

// workerIdle is how long an idle worker waits for another task before it
// exits.
const workerIdle = 2 * time.Second

// The pool grows when tasks are queued and no worker finished one for
// workerStall (the workers are blocked: writes to clients that stopped
// reading), or when the oldest has waited workerSlow (they are slow: an
// application's OnMessage).
const (
	workerStall = 10 * time.Millisecond
	workerSlow  = 100 * time.Millisecond
)

// workers runs short tasks (reading a polled socket's frames, writing a
// connection's queue) on goroutines that outlive them: a goroutine new for
// every task grows a fresh stack each time, by copying, which costs more
// than the task. At most max run; beyond, tasks queue and the workers take
// them in order as they finish, without a goroutine or a handover each.
// Bursts are common: clients pinging on a common period bring one every
// second, and a tick that closes thousands of silent clients posts a task
// for each and for every member told. A goroutine per task of such a burst
// would spend its CPU growing stacks, and leave the process larger for
// good: the runtime never frees a goroutine's record.
// When the queue stalls (see workerStall), as many workers start as are
// running, at most one per queued task, so tasks that block or are slow
// hold the others back for a bounded time. The most recently idle worker
// takes the next task, so the ones a burst added starve and exit after
// workerIdle; up to maxIdle stay, with their stacks.
type workers struct {
	mu         lockorder.Mutex[lockorder.Workers]
	idle       []*worker // most recently idle last
	maxIdle    int
	max        int // running workers, idle or not, before tasks queue
	running    int
	queue      []queued // oldest first, from head
	head       int
	finished   uint64 // tasks finished
	seen       uint64 // finished when the stall timer was last armed
	stallAfter time.Duration
	slowAfter  time.Duration
	stall      *time.Timer // armed while tasks are queued
}

type worker struct {
	task chan task // buffered: a task handed over never blocks run
}

type queued struct {
	f  task
	at time.Time
}

// task is what a worker runs. A connection's tasks are the connection
// itself under another type (readTask, writeTask, drainTask): a method
// value would allocate at every wake.
type task interface{ run() }

// taskFunc runs a function as a task.
type taskFunc func()

func (f taskFunc) run() { f() }

func newWorkers() *workers {
	p := &workers{maxIdle: 8 * runtime.GOMAXPROCS(0), stallAfter: workerStall, slowAfter: workerSlow}
	p.max = p.maxIdle
	p.stall = time.AfterFunc(time.Hour, p.unstall)
	p.stall.Stop()
	return p
}

// liveWorkers counts the workers of every Hub in the process, for tests
// that measure what idle connections cost without them.
var liveWorkers atomic.Int64

// do runs f on an idle worker, on a new one while fewer than max run, or
// queues it for the next worker that finishes.
func (p *workers) do(f func()) { p.run(taskFunc(f)) }

// run is do for a task.
func (p *workers) run(f task) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.task <- f
		return
	}
	if p.running < p.max {
		p.running++
		p.mu.Unlock()
		go p.work(f)
		return
	}
	p.queue = append(p.queue, queued{f, time.Now()})
	if p.head == len(p.queue)-1 {
		p.armLocked()
	}
	p.mu.Unlock()
}

// nextLocked takes the oldest queued task, or returns nil.
func (p *workers) nextLocked() task {
	if p.head == len(p.queue) {
		return nil
	}
	f := p.queue[p.head].f
	p.queue[p.head] = queued{}
	p.head++
	if p.head == len(p.queue) {
		p.head = 0
		p.queue = p.queue[:0]
		if cap(p.queue) > 1024 {
			p.queue = nil // a burst's queue is not kept
		}
		p.stall.Stop()
	}
	return f
}

func (p *workers) armLocked() {
	p.seen = p.finished
	p.stall.Reset(p.stallAfter)
}

// unstall runs stallAfter after the queue was last checked: if it stalled,
// it starts as many workers as are running, at most one per queued task.
func (p *workers) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.queue) {
		return
	}
	if p.finished == p.seen || time.Since(p.queue[p.head].at) >= p.slowAfter {
		for n := p.running; n > 0; n-- {
			f := p.nextLocked()
			if f == nil {
				return
			}
			p.running++
			go p.work(f)
		}
	}
	p.armLocked()
}

func (p *workers) work(f task) {
	liveWorkers.Add(1)
	defer liveWorkers.Add(-1)
	w := &worker{task: make(chan task, 1)}
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f.run()
		p.mu.Lock()
		p.finished++
		if f = p.nextLocked(); f != nil {
			p.mu.Unlock()
			continue
		}
		if len(p.idle) >= p.maxIdle {
			p.running--
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
				p.running--
			}
			p.mu.Unlock()
			if i >= 0 {
				return
			}
			f = <-w.task // do took w off the list: its task is on the way
		}
	}
}
