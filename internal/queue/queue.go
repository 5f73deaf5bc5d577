// Package queue is the one ordered queue of the codebase: items pushed in
// order and handed, in that order, to one drainer at a time, without a lock
// held while the drainer works and without a goroutine of its own.
//
// A Queue serves two styles. Asynchronous: Push reports when nobody drains
// and nobody was asked to, and the caller starts Drain on a goroutine of its
// choosing (a worker pool's), which returns once the queue is empty; a
// producer that would do the work itself when the queue is idle calls Claim
// first. Synchronous: producers Push under a lock of their own and then
// Flush, which returns once everything pushed before the call was handled,
// by the caller or by whoever drained meanwhile.
//
// Lock order: a Queue's lock is a leaf. It is never held while a drainer's
// function runs, so that function may Push to the same queue, and Push may
// be called under any lock of the caller's.
package queue

import (
	"errors"
	"sync"

	"github.com/presenced/presenced/internal/lockorder"
)

var (
	// ErrFull is returned by Push when Limit items wait.
	ErrFull = errors.New("queue: full")
	// ErrClosed is returned by Push and Append after Close.
	ErrClosed = errors.New("queue: closed")
)

// Queue is a FIFO of items handed to one drainer at a time. The zero value
// is an empty, unbounded, open queue. A Queue must not be copied after
// first use.
//
// It is kept small (56 bytes), as a connection embeds one: the counters are
// 32 bits, compared so that they may wrap.
type Queue[T any] struct {
	mu    lockorder.Mutex[lockorder.Queue]
	items []T        // waiting, oldest first
	cond  *sync.Cond // made when Flush first waits
	// Limit bounds how many items Push lets wait; 0: no bound. Set it
	// before first use.
	Limit     int32
	pushed    uint32 // items ever queued
	done      uint32 // items whose handling returned
	busy      bool   // a drainer runs, or a claimer works
	claimed   bool   // busy through Claim: the claimer's Drain follows
	scheduled bool   // Push asked its caller to start a drainer, which has not run yet
	closed    bool   // Push and Append refuse
}

// Len is how many items wait, not counting the ones a drainer holds.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Push queues v after the items before it. It returns ErrFull if Limit
// items wait and ErrClosed after Close. start reports that nobody drains
// the queue and nobody was asked to: the caller must see that Drain runs.
func (q *Queue[T]) Push(v T) (start bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false, ErrClosed
	}
	if q.Limit > 0 && len(q.items) >= int(q.Limit) {
		return false, ErrFull
	}
	return q.appendLocked(v), nil
}

// Append is Push without the Limit: for the rare item that must go in
// behind a full queue, such as the notice that the queue refused one.
func (q *Queue[T]) Append(v T) (start bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false, ErrClosed
	}
	return q.appendLocked(v), nil
}

// Close makes every later Push and Append fail, and queues final, whatever
// the Limit, after what waits: what was pushed before is still drained, in
// order. Close may be called more than once; each call queues its final
// items. start is as for Push.
func (q *Queue[T]) Close(final ...T) (start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, v := range final {
		if q.appendLocked(v) {
			start = true
		}
	}
	return start
}

// Closed reports whether Close was called.
func (q *Queue[T]) Closed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

func (q *Queue[T]) appendLocked(v T) (start bool) {
	q.items = append(q.items, v)
	q.pushed++
	if q.busy || q.scheduled {
		return false
	}
	q.scheduled = true
	return true
}

// Claim makes the caller the drainer if the queue is idle: empty, with
// nobody draining. It reports false otherwise. A caller that claimed does
// its own work, then calls Drain, which hands it what was pushed meanwhile
// and releases the claim.
func (q *Queue[T]) Claim() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy || q.scheduled || len(q.items) > 0 {
		return false
	}
	q.busy, q.claimed = true, true
	return true
}

// Drain hands the waiting items to f one at a time, in order, until the
// queue is empty, and returns. Call it when Push, Append or Close reported
// start, or after a Claim; if another drainer runs meanwhile (a Flush),
// Drain returns at once and leaves the items to it. f runs without the
// queue's lock.
func (q *Queue[T]) Drain(f func(T)) {
	q.mu.Lock()
	if q.busy && !q.claimed {
		q.scheduled = false
		q.mu.Unlock()
		return
	}
	q.busy, q.claimed, q.scheduled = true, false, false
	for {
		v, ok := q.takeLocked()
		if !ok {
			q.stopLocked()
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		f(v)
		q.mu.Lock()
		q.done++
	}
}

// Flush hands every item pushed before the call to f, in order, and
// returns once each one's handling has returned, whoever did it: if another
// goroutine drains, Flush waits for it, else it drains itself, up to the
// last item pushed before the call, so that a caller never works for later
// callers for long.
func (q *Queue[T]) Flush(f func(T)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	target := q.pushed
	for before(q.done, target) {
		if q.busy {
			if q.cond == nil {
				q.cond = sync.NewCond(&q.mu)
			}
			q.cond.Wait()
			continue
		}
		q.busy, q.scheduled = true, false
		for before(q.done, target) {
			v, _ := q.takeLocked() // not done yet, so still waiting
			q.mu.Unlock()
			f(v)
			q.mu.Lock()
			q.done++
		}
		q.stopLocked()
	}
}

// before reports whether counter a is behind b, across a wrap.
func before(a, b uint32) bool { return int32(a-b) < 0 }

// stopLocked ends a drainer's turn, and wakes the Flush calls that waited
// for it.
func (q *Queue[T]) stopLocked() {
	q.busy, q.claimed = false, false
	if q.cond != nil {
		q.cond.Broadcast()
	}
}

// takeLocked takes the oldest waiting item. An emptied queue lets go of its
// array, so an idle queue holds no memory.
func (q *Queue[T]) takeLocked() (v T, ok bool) {
	if len(q.items) == 0 {
		return v, false
	}
	v = q.items[0]
	var zero T
	q.items[0] = zero
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = nil
	}
	return v, true
}
