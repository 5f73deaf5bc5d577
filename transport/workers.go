package transport

import "time"

// workerIdle is how long a worker waits for another task before it exits.
const workerIdle = 2 * time.Second

// workers runs short tasks (reading a polled socket's frames, writing a
// connection's queue) on goroutines that outlive them: a goroutine new for
// every task would grow a fresh stack each time, by copying, which costs
// more than the task. Idle workers exit after workerIdle, so an idle server
// keeps none.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only to a waiting worker
}

func newWorkers() workers { return workers{tasks: make(chan func())} }

// do runs f on an idle worker, or on a new one if none is waiting.
func (p workers) do(f func()) {
	select {
	case p.tasks <- f:
	default:
		go p.work(f)
	}
}

func (p workers) work(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(workerIdle)
		select {
		case f = <-p.tasks:
		case <-t.C:
			return
		}
	}
}
