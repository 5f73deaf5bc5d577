package tracker

import "sync"

type eventKind uint8

const (
	online eventKind = iota
	idle
	offline
)

type event[K comparable] struct {
	kind eventKind
	key  K
}

// dispatcher runs callbacks on a goroutine of its own, started when events
// arrive and gone when the queue is empty, so an idle Tracker holds no
// goroutine and a slow callback never delays a step.
//
// The queue is unbounded by design, so no event is ever dropped, but it is
// bounded in practice by the keys tracked: a key queues OnOnline only when it
// was untracked, OnIdle at most once per silence and OnOffline once per
// timeout, so while callbacks keep up it holds at most a few events per key.
type dispatcher[K comparable] struct {
	mu      sync.Mutex
	cond    sync.Cond // signalled when running turns false
	queue   []event[K]
	spare   []event[K]
	running bool
	closed  bool

	t *Tracker[K]
}

func (d *dispatcher[K]) push(evs ...event[K]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed && !d.running {
		return // Close has returned: nobody is listening any more
	}
	d.queue = append(d.queue, evs...)
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
		clear(batch)

		d.mu.Lock()
		d.spare = batch[:0]
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
