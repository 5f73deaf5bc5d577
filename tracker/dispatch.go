package tracker

import (
	"sync"
	"time"
)

type eventKind uint8

const (
	online eventKind = iota
	idle
	offline
	stepped
)

type event[K comparable] struct {
	kind eventKind
	key  K
	took time.Duration // stepped only
}

// dispatcher runs callbacks on a goroutine of its own, started when events
// arrive and gone when the queue is empty, so an idle Tracker holds no
// goroutine and a slow callback never delays a step.
//
// The queue has no cap, so no event is ever dropped; it is bounded by the keys
// tracked instead. Between two steps a key queues at most one OnOnline (when it
// was untracked; only a Remove untracks it without a step) and a step queues at
// most one OnIdle or OnOffline per key, so while callbacks keep up with the
// ring the queue holds at most about two events per key.
type dispatcher[K comparable] struct {
	mu      sync.Mutex
	cond    sync.Cond // signalled when running turns false or a batch is done
	queue   []event[K]
	spare   []event[K]
	running bool
	closed  bool
	pushed  uint64 // events queued so far
	done    uint64 // events whose callback has returned

	t *Tracker[K]
}

func (d *dispatcher[K]) push(evs ...event[K]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed && !d.running {
		return // Close has returned: nobody is listening any more
	}
	d.queue = append(d.queue, evs...)
	d.pushed += uint64(len(evs))
	if !d.running {
		d.running = true
		go d.run()
	}
}

func (d *dispatcher[K]) run() {
	for {
		d.mu.Lock()
		if len(d.queue) == 0 {
			d.running = false
			d.cond.Broadcast()
			d.mu.Unlock()
			return
		}
		batch := d.queue
		d.queue, d.spare = d.spare[:0], nil
		d.mu.Unlock()

		for _, ev := range batch {
			d.call(ev)
		}
		n := len(batch)
		clear(batch)

		d.mu.Lock()
		d.spare = batch[:0]
		d.done += uint64(n)
		d.cond.Broadcast()
		d.mu.Unlock()
	}
}

func (d *dispatcher[K]) call(ev event[K]) {
	t := d.t
	switch ev.kind {
	case online:
		t.onOnline(ev.key)
	case idle:
		t.onIdle(ev.key)
	case offline:
		t.onOffline(ev.key)
	case stepped:
		t.onStep(ev.took)
	}
}

// settle waits until every event pushed before the call has been handled.
func (d *dispatcher[K]) settle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for target := d.pushed; d.done < target && d.running; {
		d.cond.Wait()
	}
}

// close waits until the queue is drained; events pushed later are dropped.
func (d *dispatcher[K]) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for d.running {
		d.cond.Wait()
	}
}
