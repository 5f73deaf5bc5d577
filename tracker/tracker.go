// Package tracker tells which keys have gone quiet, with a ring of slots (a
// hashed timing wheel) instead of a timer per key.
//
// Every Touch of a key is a keepalive. A cursor steps once per Tick over a
// ring of Slots slots; a key that is not touched again is reported offline by
// the Slots-th step after its last touch, that is between (Slots-1)*Tick and
// Slots*Tick of wall time later. With the defaults (31 slots, 1 s) the
// timeout is 30 s.
//
// A keepalive of a tracked key is one lock-free hash-table lookup and at most
// one atomic compare-and-swap: the key keeps its deadline (a step number) and
// stays in the slot where it was put; when the cursor reaches that slot, the
// key is re-checked and either reported or moved to the slot of its new
// deadline. A step therefore costs only the keys in the scanned slot.
//
// All methods of a Tracker are safe for concurrent use. Callbacks run one at a
// time on a goroutine of the tracker's own, in the order the events happened,
// never on the goroutine that steps the cursor and never under the tracker's
// locks, so a callback may call Touch, Remove or any other method except
// Close.
package tracker

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults used when a Config field is zero.
const (
	DefaultSlots = 31
	DefaultTick  = time.Second
)

const maxSlots = 1 << 16 // and 2^24 steps of meta's next check cover a turn

// Config configures a Tracker. The zero value is a 31-slot ring stepping once a
// second (a 30 s timeout) with no callbacks.
type Config[K comparable] struct {
	Slots     int           // ring size; 0 means 31
	Tick      time.Duration // cursor step; 0 means 1 s
	IdleAfter time.Duration // 0: off. Else OnIdle fires once per silence, at step ceil(IdleAfter/Tick)+1 after the last touch; must be < the timeout
	OnOnline  func(key K)   // first Touch of a key that was not tracked
	OnIdle    func(key K)   // probe stage: e.g. send a WebSocket ping
	OnOffline func(key K)   // the key timed out
	// OnStep, if set, is called after every step, by Run or Advance, after
	// that step's OnIdle and OnOffline calls, with how long the step's scan
	// took. A caller that batches work per step flushes it here.
	OnStep func(took time.Duration)
}

// Tracker tracks keys that must keep touching to stay online. Create one with
// New.
type Tracker[K comparable] struct {
	slots     int64
	tick      time.Duration
	idleSteps int64 // 0: no probe stage
	onOnline  func(K)
	onIdle    func(K)
	onOffline func(K)
	onStep    func(time.Duration)

	seed   maphash.Seed
	shards []shard[K]
	mask   uint64
	n      atomic.Int64 // keys tracked

	stepMu  sync.Mutex   // serialises steps, by Advance and Run
	now     atomic.Int64 // steps taken; the cursor is now % slots
	scratch []event[K]   // a step's events, owned by the holder of stepMu
	// lastExpired sizes the next step's result, under stepMu.
	lastExpired int

	events dispatcher[K]

	runMu     sync.Mutex   // held by the one Run that steps
	stalled   atomic.Int64 // UnixNano when Run last found itself behind the clock
	closing   chan struct{}
	closeOnce sync.Once
}

// New returns a Tracker for cfg, or an error if cfg is invalid. The Tracker
// does not step until Run or Advance is called.
func New[K comparable](cfg Config[K]) (*Tracker[K], error) {
	slots, tick := cfg.Slots, cfg.Tick
	if slots == 0 {
		slots = DefaultSlots
	}
	if tick == 0 {
		tick = DefaultTick
	}
	if slots < 2 || slots > maxSlots {
		return nil, fmt.Errorf("tracker: Slots must be between 2 and %d (0 for %d), got %d", maxSlots, DefaultSlots, cfg.Slots)
	}
	if tick < 0 {
		return nil, fmt.Errorf("tracker: Tick must be positive (0 for %v), got %v", DefaultTick, cfg.Tick)
	}
	if tick > time.Duration(1<<62)/time.Duration(slots) {
		return nil, fmt.Errorf("tracker: Tick %v times %d slots overflows a time.Duration", tick, slots)
	}
	timeout := time.Duration(slots-1) * tick
	if cfg.IdleAfter < 0 || cfg.IdleAfter >= timeout {
		return nil, fmt.Errorf("tracker: IdleAfter must be 0 (off) or less than the timeout %v, got %v", timeout, cfg.IdleAfter)
	}

	// Keep shards*slots bounded so a large ring stays cheap to allocate.
	nshards := nShards
	for nshards > 1 && nshards*slots > 1<<18 {
		nshards /= 2
	}
	t := &Tracker[K]{
		slots:     int64(slots),
		tick:      tick,
		onOnline:  cfg.OnOnline,
		onIdle:    cfg.OnIdle,
		onOffline: cfg.OnOffline,
		onStep:    cfg.OnStep,
		seed:      maphash.MakeSeed(),
		shards:    make([]shard[K], nshards),
		mask:      uint64(nshards - 1),
		closing:   make(chan struct{}),
	}
	if cfg.IdleAfter > 0 && cfg.OnIdle != nil {
		t.idleSteps = ceilSteps(cfg.IdleAfter, tick) + 1
	}
	t.events.cond.L = &t.events.mu
	t.events.t = t
	for i := range t.shards {
		t.shards[i].lists = make([][]uint32, slots)
	}
	return t, nil
}

// ceilSteps returns ceil(d/tick) for d >= 0, capped so that a timeout in
// steps, ceilSteps+1, fits an entry.
func ceilSteps(d, tick time.Duration) int64 {
	n := int64(d / tick)
	if d%tick != 0 {
		n++
	}
	return min(n, maxTTL-1)
}

// Timeout returns how long a key may stay silent: (Slots-1)*Tick.
func (t *Tracker[K]) Timeout() time.Duration {
	return time.Duration(t.slots-1) * t.tick
}

// Tick returns how far the cursor steps at a time.
func (t *Tracker[K]) Tick() time.Duration { return t.tick }

// Touch records a keepalive of key: it is reported offline by the Slots-th
// step from now unless touched again. It returns true if key was not tracked,
// in which case OnOnline is called. Touching a key twice between two steps is
// the same as touching it once.
func (t *Tracker[K]) Touch(key K) (added bool) {
	return t.touch(key, t.slots)
}

// TouchFor is Touch with a timeout of its own for key: the key is reported
// offline by step ceil(d/Tick)+1 from now. d may span many turns of the ring;
// d <= 0 means the next step; timeouts longer than 2^32-2 ticks are cut to
// that. The timeout holds until the next Touch or TouchFor of key.
func (t *Tracker[K]) TouchFor(key K, d time.Duration) (added bool) {
	return t.touch(key, ceilSteps(max(d, 0), t.tick)+1)
}

func (t *Tracker[K]) touch(key K, ttl int64) bool {
	h := maphash.Comparable(t.seed, key)
	s := &t.shards[h&t.mask]
	// The common keepalive takes no lock: find the entry and raise its
	// deadline. Any surprise (a new key, another timeout, an expiry or a
	// rehash under way) goes to the locked path, which settles it.
	now := s.now.Load()
	tb := s.tab.Load()
	if tb == nil {
		return t.touchSlow(s, key, h, ttl)
	}
	i := tb.find(key, h)
	if i < 0 {
		return t.touchSlow(s, key, h, ttl)
	}
	e := &tb.entries[i]
	if int64(e.ttl.Load()) != ttl || !raise(&e.word, now+ttl) || tb.frozen.Load() {
		return t.touchSlow(s, key, h, ttl)
	}
	return false
}

// raise moves the deadline in word up to deadline, starting a new silence,
// unless it is there already. It returns false if the entry is no longer
// live. A deadline never moves down here: two touches that read different
// steps settle on the later one.
func raise(word *atomic.Uint64, deadline int64) bool {
	for {
		w := word.Load()
		if w == 0 {
			return false
		}
		if int64(w>>1) >= deadline || word.CompareAndSwap(w, uint64(deadline)<<1) {
			return true
		}
	}
}

// touchSlow adds key or changes its timeout, under the shard's lock.
func (t *Tracker[K]) touchSlow(s *shard[K], key K, h uint64, ttl int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now.Load()
	deadline := now + ttl
	if tb := s.tab.Load(); tb != nil {
		if i := tb.find(key, h); i >= 0 {
			e := &tb.entries[i]
			if int64(e.ttl.Load()) == ttl {
				raise(&e.word, deadline)
				return false
			}
			// Another timeout for this key, from now on.
			e.ttl.Store(uint32(ttl))
			old := int64(e.word.Swap(uint64(deadline)<<1) >> 1)
			if deadline < old {
				// Shorter: the next check may come too late.
				s.schedule(tb, i, t.firstCheck(now, ttl, deadline), t.slots)
			}
			return false
		}
	}
	tb, i := s.insert(key, h, uint32(ttl), deadline, t.seed, t.slots)
	s.schedule(tb, i, t.firstCheck(now, ttl, deadline), t.slots)
	t.n.Add(1)
	if t.onOnline != nil {
		t.events.push(event[K]{kind: online, key: key})
	}
	return true
}

// firstCheck returns the step at which a key just touched must be checked:
// its idle step if it has one, else its deadline.
func (t *Tracker[K]) firstCheck(now, ttl, deadline int64) int64 {
	if t.idleSteps > 0 && t.idleSteps < ttl {
		return now + t.idleSteps
	}
	return deadline
}

// Remove stops tracking key, as on an explicit logout; OnOffline is not
// called. It returns true if key was tracked.
func (t *Tracker[K]) Remove(key K) (removed bool) {
	h := maphash.Comparable(t.seed, key)
	s := &t.shards[h&t.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	tb := s.tab.Load()
	if tb == nil {
		return false
	}
	i := tb.find(key, h)
	if i < 0 {
		return false
	}
	s.drop(tb, i)
	t.n.Add(-1)
	return true
}

// Online reports whether key is tracked.
func (t *Tracker[K]) Online(key K) bool {
	h := maphash.Comparable(t.seed, key)
	tb := t.shards[h&t.mask].tab.Load()
	return tb != nil && tb.find(key, h) >= 0
}

// Len returns the number of keys tracked.
func (t *Tracker[K]) Len() int {
	return int(t.n.Load())
}

// Advance steps the cursor once by hand and returns the keys that timed out
// in that step, which are also passed to OnOffline. It returns nil after
// Close.
func (t *Tracker[K]) Advance() []K {
	select {
	case <-t.closing:
		return nil
	default:
	}
	return t.step(true)
}

// Settle waits until every callback of the events so far has returned: with
// Advance, it lets a caller step the ring by hand and then look at what the
// callbacks did. It must not be called from a callback, which it would wait
// for.
func (t *Tracker[K]) Settle() {
	t.events.settle()
}

// step moves the cursor one slot and checks every entry in the slot it
// leaves, shard by shard.
func (t *Tracker[K]) step(collect bool) []K {
	t.stepMu.Lock()
	defer t.stepMu.Unlock()
	start := time.Now()
	now := t.now.Load() + 1
	var expired []K
	if collect && t.lastExpired > 0 {
		expired = make([]K, 0, t.lastExpired+t.lastExpired/8)
	}
	for i := range t.shards {
		expired = t.stepShard(&t.shards[i], now, expired, collect)
	}
	t.lastExpired = len(expired)
	t.now.Store(now)
	if t.onStep != nil {
		// Queued under stepMu, so after every event of this step.
		t.events.push(event[K]{kind: stepped, took: time.Since(start)})
	}
	return expired
}

// stepShard checks the entries of one shard in the slot that step now scans.
// It holds the shard's lock for that slot's share of one shard only, about
// 1/(Slots*64) of the keys, and keepalives take no lock at all.
func (t *Tracker[K]) stepShard(s *shard[K], now int64, expired []K, collect bool) []K {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now.Store(now)
	l := (now - 1) % t.slots
	list := s.lists[l]
	if len(list) == 0 {
		if s.wasteful() {
			s.rehash(t.seed, t.slots) // no entry is due in this slot
		}
		return expired
	}
	tb := s.tab.Load()
	// Detach the list: entries re-checked in a turn land in a fresh one.
	s.lists[l], s.spare = s.spare[:0], nil
	evs := t.scratch[:0]
	cur := uint32(now) & atMask
	for _, i := range list {
		e := &tb.entries[i]
		ttl := int64(e.ttl.Load())
		if !live(uint32(ttl)) || e.meta.Load()&atMask != cur {
			continue // removed, expired, or rescheduled: a stale index
		}
		var at int64
	check:
		w := e.word.Load()
		deadline := int64(w >> 1)
		switch idleAt := deadline - ttl + t.idleSteps; {
		case deadline <= now:
			if !e.word.CompareAndSwap(w, 0) {
				goto check // touched just now
			}
			e.ttl.Store(ttlGone)
			s.live--
			t.n.Add(-1)
			if collect {
				expired = append(expired, e.key)
			}
			if t.onOffline != nil {
				evs = append(evs, event[K]{kind: offline, key: e.key})
			}
			continue
		case t.idleSteps == 0 || t.idleSteps >= ttl:
			at = deadline
		case w&1 == 0 && idleAt <= now:
			if !e.word.CompareAndSwap(w, w|1) {
				goto check
			}
			evs = append(evs, event[K]{kind: idle, key: e.key})
			fallthrough
		case w&1 == 1:
			// A touch from now on probes no earlier than this.
			at = min(deadline, now+t.idleSteps)
		default:
			at = idleAt
		}
		s.schedule(tb, int(i), at, t.slots)
	}
	// Queue the events before unlocking, in order with the shard's others.
	if len(evs) > 0 {
		t.events.push(evs...)
	}
	clear(evs)
	t.scratch = evs[:0]
	s.spare = list[:0]
	if s.wasteful() {
		// The step is complete for this shard: every live entry's next
		// check lies in the coming turn, as rehash needs.
		s.rehash(t.seed, t.slots)
	}
	return expired
}

// Ring is a view of the ring at one moment, for display and monitoring.
type Ring struct {
	Slots  int           // ring size
	Tick   time.Duration // cursor step
	Cursor int           // the slot the next step scans
	Due    []int         // per slot, the keys whose deadline falls in it, in this turn or a later one
}

// Ring returns a view of the ring. It visits every key, so it costs O(Len);
// it is meant for a demo page or a metrics scrape, not a hot path.
func (t *Tracker[K]) Ring() Ring {
	r := Ring{Slots: int(t.slots), Tick: t.tick, Due: make([]int, t.slots)}
	for i := range t.shards {
		tb := t.shards[i].tab.Load()
		if tb == nil {
			continue
		}
		for j := range tb.entries {
			if w := tb.entries[j].word.Load(); w != 0 {
				r.Due[(int64(w>>1)-1)%t.slots]++
			}
		}
	}
	r.Cursor = int(t.now.Load() % t.slots)
	return r
}

// Run steps the cursor from the wall clock, once per Tick, until ctx is done
// or Close is called. It counts the steps due since it started, so after a
// stall it catches up by stepping as many times as ticks were missed. A touch
// counts from the last step taken, so the wall-time bounds of the timeout hold
// up to how late the goroutine running Run is scheduled. Only one Run steps at
// a time: a second concurrent call returns at once.
func (t *Tracker[K]) Run(ctx context.Context) {
	if !t.runMu.TryLock() {
		return
	}
	defer t.runMu.Unlock()
	start := time.Now()
	ticker := time.NewTicker(t.tick)
	defer ticker.Stop()
	var done int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.closing:
			return
		case <-ticker.C:
		}
		// A Ticker drops ticks when its reader is slow; the clock does not.
		due := int64(time.Since(start) / t.tick)
		if due-done > 1 {
			t.stalled.Store(time.Now().UnixNano())
		}
		for ; done < due; done++ {
			if ctx.Err() != nil || t.isClosing() {
				return
			}
			t.step(false)
		}
	}
}

// Stalled returns when Run last found itself more than one step behind the
// clock, because the process was stopped or starved, and caught up; the zero
// Time if never. Keys touched during the stall may still sit unread in
// sockets when the catch-up steps report them offline: a caller can give
// those a moment before acting on the report.
func (t *Tracker[K]) Stalled() time.Time {
	if ns := t.stalled.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (t *Tracker[K]) isClosing() bool {
	select {
	case <-t.closing:
		return true
	default:
		return false
	}
}

// Close stops Run and Advance and waits until every pending callback has run.
// Events after that are not reported. Close is idempotent; it must not be
// called from a callback, which it would wait for.
func (t *Tracker[K]) Close() {
	t.closeOnce.Do(func() { close(t.closing) })
	// Taking runMu waits for Run to return; holding it keeps another out.
	t.runMu.Lock()
	defer t.runMu.Unlock()
	t.events.close()
}
