package main

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RussellLuo/timingwheel"
	"github.com/zeromicro/go-zero/core/collection"

	"github.com/presenced/presenced/tracker"
)

// subject is one way of tracking keepalives that the harness measures.
// Add is the first keepalive of a key (a login), Touch a keepalive of a key
// already tracked; both must be safe for concurrent use once populated.
type subject interface {
	Add(key string)
	Touch(key string)
	Close()
}

// stepper is a subject whose clock can be stepped by hand. Step returns once
// the step's scan is done; expiry callbacks may still be running elsewhere.
type stepper interface {
	Step()
}

// config is what every subject is built from. The timeout is Period steps
// (Period*Tick of wall time for the subjects that run on the clock): a key
// touched before step s is reported by step s+Period, never earlier.
type config struct {
	Keys     int           // expected number of keys, for pre-sizing maps as a user would
	Period   int           // steps from a touch to its expiry (31 = the default ring)
	Tick     time.Duration // one step of wall time, for the clock-driven subjects
	OnExpire func(key string)
}

func (c config) timeout() time.Duration { return time.Duration(c.Period-1) * c.Tick }

// impl names a subject and builds it.
type impl struct {
	Name  string
	Notes string // how it is used, for the reader of the table
	New   func(config) (subject, error)
}

var impls = []impl{
	{"presenced tracker", "Touch; step = Advance", newTrackerSubject},
	{"floor: map[string]*atomic.Int64", "read-only map lookup + atomic Store, no expiry at all", newFloorSubject},
	{"map + time.AfterFunc/Reset, 1 mutex", "typical: one sync.Mutex around the map, Reset under it", newTimerSubject(1)},
	{"map + time.AfterFunc/Reset, 64 shards", "the same, map split over 64 mutexes by maphash", newTimerSubject(64)},
	{"polling map scan", "map[string]int64 last-seen under one mutex; step = scan every key", newPollingSubject},
	{"RussellLuo/timingwheel", "60 slots of one tick; keepalive = Stop + AfterFunc (it has no Reset), map under one mutex", newRussellLuoSubject},
	{"go-zero collection.TimingWheel", "31 slots; SetTimer to add, MoveTimer to keep alive; stepped by a hand ticker", newGoZeroSubject},
}

// trackerSubject is this repository's tracker.
type trackerSubject struct{ t *tracker.Tracker[string] }

func newTrackerSubject(c config) (subject, error) {
	t, err := tracker.New(tracker.Config[string]{
		Slots:     c.Period,
		Tick:      c.Tick,
		OnOffline: c.OnExpire,
	})
	if err != nil {
		return nil, fmt.Errorf("tracker.New: %w", err)
	}
	return &trackerSubject{t: t}, nil
}

func (s *trackerSubject) Add(key string)   { s.t.Touch(key) }
func (s *trackerSubject) Touch(key string) { s.t.Touch(key) }
func (s *trackerSubject) Step()            { s.t.Advance() }
func (s *trackerSubject) Close()           { s.t.Close() }

// floorSubject is the least any keepalive can cost: find the key, store a
// stamp. It never expires anything, so it has no step.
type floorSubject struct {
	m   map[string]*atomic.Int64
	now int64
}

func newFloorSubject(c config) (subject, error) {
	return &floorSubject{m: make(map[string]*atomic.Int64, c.Keys), now: 1}, nil
}

// Add is only called while populating, from one goroutine: the map is
// read-only afterwards, which is what makes this the floor.
func (s *floorSubject) Add(key string)   { v := new(atomic.Int64); v.Store(s.now); s.m[key] = v }
func (s *floorSubject) Touch(key string) { s.m[key].Store(s.now) }
func (s *floorSubject) Close()           {}

// shardedMap is a map split over n mutex-guarded shards (n = 1: one mutex).
type shardedMap[V any] struct {
	seed   maphash.Seed
	mask   uint64
	shards []mapShard[V]
}

type mapShard[V any] struct {
	mu sync.Mutex
	m  map[string]V
	_  [40]byte // keep neighbouring shards' mutexes off one cache line
}

func newShardedMap[V any](n, keys int) *shardedMap[V] {
	s := &shardedMap[V]{seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]mapShard[V], n)}
	for i := range s.shards {
		s.shards[i].m = make(map[string]V, keys/n)
	}
	return s
}

func (s *shardedMap[V]) shard(key string) *mapShard[V] {
	if s.mask == 0 {
		return &s.shards[0]
	}
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// timerSubject keeps one runtime timer per key and re-arms it on every
// keepalive. Timers are made to fire only in tests: a key that fires while a
// Touch re-arms it could be reported twice, a race the benchmark never runs.
type timerSubject struct {
	m        *shardedMap[*time.Timer]
	d        time.Duration
	onExpire func(string)
}

func newTimerSubject(shards int) func(config) (subject, error) {
	return func(c config) (subject, error) {
		return &timerSubject{m: newShardedMap[*time.Timer](shards, c.Keys), d: c.timeout(), onExpire: c.OnExpire}, nil
	}
}

func (s *timerSubject) Add(key string) { s.Touch(key) }

func (s *timerSubject) Touch(key string) {
	sh := s.m.shard(key)
	sh.mu.Lock()
	if t, ok := sh.m[key]; ok {
		t.Reset(s.d)
	} else {
		sh.m[key] = time.AfterFunc(s.d, func() { s.expire(key) })
	}
	sh.mu.Unlock()
}

func (s *timerSubject) expire(key string) {
	sh := s.m.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
	s.onExpire(key)
}

func (s *timerSubject) Close() {
	for i := range s.m.shards {
		sh := &s.m.shards[i]
		sh.mu.Lock()
		for _, t := range sh.m {
			t.Stop()
		}
		sh.mu.Unlock()
	}
}

// pollingSubject stamps each keepalive with the current step and finds
// expired keys by scanning all of them at every step.
type pollingSubject struct {
	mu       sync.Mutex
	seen     map[string]int64
	now      int64
	period   int64
	expired  []string // reused across steps; only Step touches it
	onExpire func(string)
}

func newPollingSubject(c config) (subject, error) {
	return &pollingSubject{seen: make(map[string]int64, c.Keys), period: int64(c.Period), onExpire: c.OnExpire}, nil
}

func (s *pollingSubject) Add(key string) { s.Touch(key) }

func (s *pollingSubject) Touch(key string) {
	s.mu.Lock()
	s.seen[key] = s.now
	s.mu.Unlock()
}

func (s *pollingSubject) Step() {
	s.mu.Lock()
	s.now++
	for k, at := range s.seen {
		if s.now-at >= s.period {
			delete(s.seen, k)
			s.expired = append(s.expired, k)
		}
	}
	s.mu.Unlock()
	// Notify outside the lock, as a user would, so keepalives are not held up.
	for _, k := range s.expired {
		s.onExpire(k)
	}
	clear(s.expired)
	s.expired = s.expired[:0]
}

func (s *pollingSubject) Close() {}

// russellLuoSubject keeps one timingwheel.Timer per key; a keepalive stops
// it and schedules a new one, since that library has no Reset.
type russellLuoSubject struct {
	tw       *timingwheel.TimingWheel
	mu       sync.Mutex
	m        map[string]*timingwheel.Timer
	d        time.Duration
	onExpire func(string)
}

func newRussellLuoSubject(c config) (subject, error) {
	// 60 slots: the whole timeout (Period-1 ticks) fits the first wheel even
	// while the wheel's clock lags (it advances only when a bucket expires).
	tw := timingwheel.NewTimingWheel(c.Tick, 60)
	tw.Start()
	return &russellLuoSubject{tw: tw, m: make(map[string]*timingwheel.Timer, c.Keys), d: c.timeout(), onExpire: c.OnExpire}, nil
}

func (s *russellLuoSubject) Add(key string) { s.Touch(key) }

func (s *russellLuoSubject) Touch(key string) {
	s.mu.Lock()
	if t, ok := s.m[key]; ok {
		t.Stop()
	}
	s.m[key] = s.tw.AfterFunc(s.d, func() { s.expire(key) })
	s.mu.Unlock()
}

func (s *russellLuoSubject) expire(key string) {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
	s.onExpire(key)
}

func (s *russellLuoSubject) Close() {
	s.tw.Stop()
}

// goZeroSubject is go-zero's TimingWheel driven by handTicker, so the
// harness can step it like the tracker instead of waiting on the clock.
type goZeroSubject struct {
	tw     *collection.TimingWheel
	ticker *handTicker
	delay  time.Duration
}

// handTicker is a timex.Ticker whose ticks are sent by hand. Its channel is
// unbuffered, so a send returns only once the wheel's loop has taken the tick.
type handTicker struct{ c chan time.Time }

func (h *handTicker) Chan() <-chan time.Time { return h.c }
func (h *handTicker) Stop()                  {}

// goZeroSync is a key never added: removing it is a no-op that the wheel's
// loop handles only after it has finished any tick it took before.
type goZeroSync struct{}

func newGoZeroSubject(c config) (subject, error) {
	ht := &handTicker{c: make(chan time.Time)}
	tw, err := collection.NewTimingWheelWithTicker(c.Tick, c.Period, func(k, _ any) {
		c.OnExpire(k.(string))
	}, ht)
	if err != nil {
		return nil, fmt.Errorf("collection.NewTimingWheelWithTicker: %w", err)
	}
	// go-zero runs a task at the delay/interval-th tick after it is set;
	// Period ticks make its expiry step the same as the other subjects'.
	return &goZeroSubject{tw: tw, ticker: ht, delay: time.Duration(c.Period) * c.Tick}, nil
}

// The wheel only fails once stopped, which the harness never does before
// it is done with the subject, so errors are not checked on the hot path.
func (s *goZeroSubject) Add(key string)   { _ = s.tw.SetTimer(key, nil, s.delay) }
func (s *goZeroSubject) Touch(key string) { _ = s.tw.MoveTimer(key, s.delay) }

func (s *goZeroSubject) Step() {
	s.ticker.c <- time.Time{}
	_ = s.tw.RemoveTimer(goZeroSync{})
}

func (s *goZeroSubject) Close() { s.tw.Stop() }
