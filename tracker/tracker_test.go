package tracker

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config[string]
		ok   bool
	}{
		{"zero value", Config[string]{}, true},
		{"two slots", Config[string]{Slots: 2}, true},
		{"large ring", Config[string]{Slots: 3600}, true},
		{"one slot", Config[string]{Slots: 1}, false},
		{"negative slots", Config[string]{Slots: -5}, false},
		{"too many slots", Config[string]{Slots: maxSlots + 1}, false},
		{"negative tick", Config[string]{Tick: -time.Second}, false},
		{"overflowing tick", Config[string]{Tick: time.Duration(1 << 62)}, false},
		{"negative idle", Config[string]{IdleAfter: -1}, false},
		{"idle at timeout", Config[string]{IdleAfter: 30 * time.Second}, false},
		{"idle below timeout", Config[string]{IdleAfter: 29 * time.Second, OnIdle: func(string) {}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.cfg)
			if !tc.ok {
				require.Error(t, err)
				assert.Nil(t, tr)
				return
			}
			require.NoError(t, err)
			tr.Close()
		})
	}
}

func TestDefaults(t *testing.T) {
	tr, err := New(Config[int]{})
	require.NoError(t, err)
	defer tr.Close()
	assert.Equal(t, 30*time.Second, tr.Timeout())
	r := tr.Ring()
	assert.Equal(t, 31, r.Slots)
	assert.Equal(t, time.Second, r.Tick)
	assert.Len(t, r.Due, 31)
}

// expiresAt advances tr until key is reported and returns how many steps that
// took; it fails if key is reported twice or not within limit steps.
func expiresAt(t *testing.T, tr *Tracker[string], key string, limit int) int {
	t.Helper()
	at := 0
	for step := 1; step <= limit; step++ {
		for _, k := range tr.Advance() {
			if k == key {
				require.Zero(t, at, "%s reported twice, at steps %d and %d", key, at, step)
				at = step
			}
		}
		if at > 0 && step >= at+int(tr.slots)+1 {
			break // watched a turn more for a second report
		}
	}
	require.NotZero(t, at, "%s was not reported within %d steps", key, limit)
	return at
}

func TestTimingEdges(t *testing.T) {
	const S = 31
	tick := time.Second
	tests := []struct {
		name   string
		before int // steps taken before the touches
		touch  func(tr *Tracker[string])
		want   int // the step after the touches that reports "k"
	}{
		{"touch at cursor 0", 0, func(tr *Tracker[string]) { tr.Touch("k") }, S},
		{"touch at the last slot", S - 1, func(tr *Tracker[string]) { tr.Touch("k") }, S},
		{"touch after the cursor wrapped", S, func(tr *Tracker[string]) { tr.Touch("k") }, S},
		{"touch after many turns", 5*S + 7, func(tr *Tracker[string]) { tr.Touch("k") }, S},
		{"touch twice in one step", 3, func(tr *Tracker[string]) { tr.Touch("k"); tr.Touch("k") }, S},
		{"TouchFor of 0 is the next step", 0, func(tr *Tracker[string]) { tr.TouchFor("k", 0) }, 1},
		{"TouchFor of a negative is the next step", 4, func(tr *Tracker[string]) { tr.TouchFor("k", -time.Hour) }, 1},
		{"TouchFor of a fraction of a tick", 0, func(tr *Tracker[string]) { tr.TouchFor("k", tick/10) }, 2},
		{"TouchFor of an exact number of ticks", 2, func(tr *Tracker[string]) { tr.TouchFor("k", 5*tick) }, 6},
		{"TouchFor of the timeout is Touch", 9, func(tr *Tracker[string]) { tr.TouchFor("k", (S-1)*tick) }, S},
		// Deadline S+1 steps ahead: its slot is the one under the cursor, and
		// it must survive the first pass over it.
		{"target slot under the cursor", 0, func(tr *Tracker[string]) { tr.TouchFor("k", S*tick) }, S + 1},
		{"target slot under the cursor at slot 0", S, func(tr *Tracker[string]) { tr.TouchFor("k", S*tick) }, S + 1},
		{"several turns (rounds)", 0, func(tr *Tracker[string]) { tr.TouchFor("k", 3610*tick) }, 3611},
		{"shorter TouchFor replaces a longer one", 1, func(tr *Tracker[string]) { tr.TouchFor("k", 100*tick); tr.TouchFor("k", 2*tick) }, 3},
		{"Touch after a long TouchFor", 1, func(tr *Tracker[string]) { tr.TouchFor("k", 100*tick); tr.Touch("k") }, S},
		{"longer TouchFor after Touch", 1, func(tr *Tracker[string]) { tr.Touch("k"); tr.TouchFor("k", 40*tick) }, 41},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(Config[string]{Slots: S, Tick: tick})
			require.NoError(t, err)
			defer tr.Close()
			for range tc.before {
				tr.Advance()
			}
			tc.touch(tr)
			assert.Equal(t, tc.want, expiresAt(t, tr, "k", tc.want+2*S))
			assert.False(t, tr.Online("k"))
			assert.Zero(t, tr.Len())
		})
	}
}

func TestRetouchRestartsTheCount(t *testing.T) {
	tr, err := New(Config[string]{Slots: 10})
	require.NoError(t, err)
	defer tr.Close()
	require.True(t, tr.Touch("k"))
	for i := range 100 {
		require.Empty(t, tr.Advance(), "step %d", i)
		if i%7 == 0 {
			require.False(t, tr.Touch("k"))
		}
	}
	// The last touch came after step 99 (i=98), so the deadline is step 109.
	assert.Equal(t, 10-2+1, expiresAt(t, tr, "k", 30))
}

func TestRemove(t *testing.T) {
	var r recorder
	tr, err := New(r.config(5))
	require.NoError(t, err)
	defer tr.Close()

	assert.False(t, tr.Remove("nobody"))
	tr.Touch("a")
	tr.Touch("b")
	assert.True(t, tr.Remove("a"))
	assert.False(t, tr.Remove("a"))
	assert.False(t, tr.Online("a"))
	assert.Equal(t, 1, tr.Len())
	var got []string
	for range 10 {
		got = append(got, tr.Advance()...)
	}
	assert.Equal(t, []string{"b"}, got)
	tr.drain()
	assert.Equal(t, []string{"online:a", "online:b", "offline:b"}, r.take())

	// Removed and touched again: a fresh key, with a fresh count.
	tr.Touch("a")
	tr.Advance()
	tr.Remove("a")
	tr.Touch("a")
	assert.Equal(t, 5, expiresAt(t, tr, "a", 20))
}

func TestTouchFromOnOffline(t *testing.T) {
	var tr *Tracker[string]
	var readded atomic.Int32
	tr, err := New(Config[string]{
		Slots: 3,
		OnOffline: func(k string) {
			if readded.Add(1) == 1 {
				tr.Touch(k) // re-adds the key, from the dispatcher
			}
		},
	})
	require.NoError(t, err)
	defer tr.Close()

	tr.Touch("k")
	tr.Advance()
	tr.Advance()
	require.Equal(t, []string{"k"}, tr.Advance())
	tr.drain()
	assert.True(t, tr.Online("k"), "OnOffline's Touch re-added the key")
	assert.Equal(t, 3, expiresAt(t, tr, "k", 10))
	tr.drain()
	assert.EqualValues(t, 2, readded.Load())
}

func TestCallbacksInOrder(t *testing.T) {
	var r recorder
	cfg := r.config(5)
	cfg.IdleAfter = 2 * time.Second // idle at step 3 after a touch
	tr, err := New(cfg)
	require.NoError(t, err)
	defer tr.Close()

	tr.Touch("a")
	tr.Advance() // 1
	tr.Touch("b")
	tr.Advance() // 2
	tr.Advance() // 3: a idle
	tr.Advance() // 4: b idle
	tr.Touch("a")
	tr.Advance() // 5: b offline
	tr.Advance() // 6
	tr.Advance() // 7
	tr.Advance() // 8: a idle (touched after step 4)
	tr.Advance() // 9: a offline
	tr.drain()
	assert.Equal(t, []string{
		"online:a", "online:b",
		"idle:a", "idle:b", "offline:b",
		"idle:a", "offline:a",
	}, r.take())
}

func TestIdleOncePerSilence(t *testing.T) {
	var r recorder
	cfg := r.config(31)
	cfg.IdleAfter = 15 * time.Second // idle at step 16
	tr, err := New(cfg)
	require.NoError(t, err)
	defer tr.Close()

	tr.Touch("k")
	for range 16 {
		tr.Advance()
	}
	tr.drain()
	assert.Equal(t, []string{"online:k", "idle:k"}, r.take())

	// Touched right after the probe: a new silence, probed 16 steps later,
	// even though the entry sits in the slot of its old deadline.
	tr.Touch("k")
	for i := 1; i <= 16; i++ {
		tr.Advance()
		tr.drain()
		if i < 16 {
			require.Empty(t, r.take(), "step %d", i)
		}
	}
	assert.Equal(t, []string{"idle:k"}, r.take())
	assert.Equal(t, 15, expiresAt(t, tr, "k", 40))
	tr.drain()
	assert.Equal(t, []string{"offline:k"}, r.take())
}

func TestIdleNotForLongerThanTimeout(t *testing.T) {
	var r recorder
	cfg := r.config(10)
	cfg.IdleAfter = 5 * time.Second
	tr, err := New(cfg)
	require.NoError(t, err)
	defer tr.Close()

	tr.TouchFor("short", 2*time.Second) // deadline before its idle step: never idle
	tr.TouchFor("long", 100*time.Second)
	for range 101 {
		tr.Advance()
	}
	tr.drain()
	assert.Equal(t, []string{"online:short", "online:long", "offline:short", "idle:long", "offline:long"}, r.take())
}

func TestCloseWaitsForCallbacks(t *testing.T) {
	var done atomic.Bool
	tr, err := New(Config[int]{Slots: 2, OnOffline: func(int) {
		time.Sleep(20 * time.Millisecond)
		done.Store(true)
	}})
	require.NoError(t, err)
	tr.Touch(1)
	tr.Advance()
	require.Equal(t, []int{1}, tr.Advance())
	tr.Close()
	assert.True(t, done.Load(), "Close returned before the callback ran")
	tr.Close() // idempotent
	assert.Nil(t, tr.Advance(), "Advance after Close steps nothing")

	ran := make(chan struct{})
	go func() {
		tr.Run(context.Background()) // returns at once after Close
		close(ran)
	}()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("Run after Close did not return")
	}
}

func TestCloseStopsRun(t *testing.T) {
	tr, err := New(Config[int]{Tick: time.Millisecond})
	require.NoError(t, err)
	stopped := make(chan struct{})
	go func() {
		tr.Run(context.Background())
		close(stopped)
	}()
	require.Eventually(t, func() bool { return tr.now.Load() > 3 }, 10*time.Second, time.Millisecond)
	tr.Close()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
}

func TestRunCatchesUp(t *testing.T) {
	const tick = 5 * time.Millisecond
	tr, err := New(Config[int]{Tick: tick})
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	go tr.Run(ctx)

	// Stall the stepper for 20 ticks; afterwards it must make up for them.
	// Without catching up it would stay 20 behind the clock; a loaded
	// machine may keep it a few ticks behind, so 5 are allowed.
	tr.stepMu.Lock()
	time.Sleep(20 * tick)
	tr.stepMu.Unlock()
	require.Eventually(t, func() bool {
		return tr.now.Load() >= int64(time.Since(start)/tick)-5
	}, 10*time.Second, time.Millisecond)
	assert.LessOrEqual(t, tr.now.Load(), int64(time.Since(start)/tick), "never steps early")
}

func TestRunWallClock(t *testing.T) {
	const (
		slots = 6
		tick  = 20 * time.Millisecond
		keys  = 200
	)
	var (
		mu      sync.Mutex
		touched = map[int]time.Time{}
		stepped = map[int]int64{} // the last step taken before the touch
		offAt   = map[int]time.Time{}
	)
	done := make(chan struct{})
	tr, err := New(Config[int]{Slots: slots, Tick: tick, OnOffline: func(k int) {
		mu.Lock()
		defer mu.Unlock()
		offAt[k] = time.Now()
		if len(offAt) == keys {
			close(done)
		}
	}})
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now() // Run's clock starts no earlier
	go tr.Run(ctx)

	for k := range keys {
		mu.Lock()
		stepped[k] = tr.now.Load()
		touched[k] = time.Now()
		mu.Unlock()
		tr.Touch(k)
		if k%20 == 0 {
			time.Sleep(tick / 3) // spread touches over several steps
		}
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("not every key went offline")
	}
	timeout := tr.Timeout()
	mu.Lock()
	defer mu.Unlock()
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for k, at := range offAt {
		// Strictly: reported by the step Slots after the touch's, and Run
		// never takes step n before n ticks of its clock.
		earliest := started.Add(time.Duration(stepped[k]+slots) * tick)
		assert.False(t, at.Before(earliest), "key %d went offline %v before its step", k, earliest.Sub(at))
		d := at.Sub(touched[k])
		lo, hi = min(lo, d), max(hi, d)
	}
	// Between timeout and timeout+tick on a quiet machine; a step that runs
	// late (-race, a loaded machine) shortens the silence by its delay or
	// delays the report, so only a generous upper bound is asserted.
	t.Logf("touch to offline: %v to %v (timeout %v, tick %v)", lo, hi, timeout, tick)
	assert.Less(t, hi, timeout+tick+2*time.Second, "a key went offline late")
}

func TestRing(t *testing.T) {
	tr, err := New(Config[string]{Slots: 5})
	require.NoError(t, err)
	defer tr.Close()
	assert.Equal(t, 0, tr.Ring().Cursor)
	tr.Touch("a") // due at step 5: slot 4, just behind the cursor
	tr.Advance()
	tr.Advance()
	tr.Touch("b") // due at step 7: slot 1, just behind the cursor at 2
	tr.TouchFor("c", 0)
	r := tr.Ring()
	assert.Equal(t, 2, r.Cursor)
	assert.Equal(t, []int{0, 1, 1, 0, 1}, r.Due)
	for range 4 {
		tr.Advance()
	}
	assert.Equal(t, 1, tr.Ring().Cursor, "cursor wraps round")
}

func TestConcurrentHotKeysNeverExpire(t *testing.T) {
	const (
		hot   = 100
		steps = 120
	)
	var falseOffline atomic.Int32
	tr, err := New(Config[string]{Slots: 4, OnOffline: func(k string) {
		if k[0] == 'h' {
			falseOffline.Add(1)
		}
	}, OnOnline: func(string) {}})
	require.NoError(t, err)
	defer tr.Close()

	hotKeys := make([]string, hot)
	for i := range hotKeys {
		hotKeys[i] = fmt.Sprintf("h%d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := range 3 { // noise: touch, remove and read other keys
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("c%d-%d", g, i%500)
				switch i % 5 {
				case 0, 1:
					tr.Touch(k)
				case 2:
					tr.TouchFor(k, time.Duration(i%7)*time.Second)
				case 3:
					tr.Remove(k)
				case 4:
					tr.Online(k)
					tr.Len()
					if i%97 == 0 {
						tr.Ring()
					}
				}
			}
		})
	}
	// Two goroutines share the hot keys and touch them round after round,
	// while steps run; a step waits only until each has finished a round
	// begun after the previous step, so touches race the steps themselves.
	var rounds [2]atomic.Int64
	for half := range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				for i := half; i < hot; i += 2 {
					tr.Touch(hotKeys[i])
				}
				rounds[half].Add(1)
			}
		})
	}
	for s := range steps {
		r0, r1 := rounds[0].Load(), rounds[1].Load()
		for rounds[0].Load() < r0+2 || rounds[1].Load() < r1+2 {
			runtime.Gosched()
		}
		for _, k := range tr.Advance() {
			require.NotEqual(t, byte('h'), k[0], "hot key %s expired at step %d", k, s)
		}
	}
	cancel()
	wg.Wait()
	tr.drain()
	assert.Zero(t, falseOffline.Load())
	for _, k := range hotKeys {
		assert.True(t, tr.Online(k))
	}
}

// OnStep follows each step's other callbacks, for Advance and Run alike, so
// a caller that batches per step sees the whole step before it flushes.
func TestOnStepFollowsTheStepsEvents(t *testing.T) {
	var (
		mu  sync.Mutex
		log []string
	)
	record := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
	}
	tr, err := New(Config[string]{
		Slots:     3,
		IdleAfter: time.Second,
		OnIdle:    func(k string) { record("idle " + k) },
		OnOffline: func(k string) { record("offline " + k) },
		OnStep: func(took time.Duration) {
			assert.GreaterOrEqual(t, took, time.Duration(0))
			record("step")
		},
	})
	require.NoError(t, err)
	tr.Touch("a")
	for range 3 {
		tr.Advance()
	}
	tr.Close() // waits for the callbacks
	assert.Equal(t, []string{"step", "idle a", "step", "offline a", "step"}, log)

	steps := make(chan struct{}, 16)
	tr, err = New(Config[string]{Tick: time.Millisecond, OnStep: func(time.Duration) {
		select {
		case steps <- struct{}{}:
		default:
		}
	}})
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go tr.Run(ctx)
	for range 3 {
		select {
		case <-steps:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "Run did not call OnStep")
		}
	}
}

// Settle returns once the callbacks of the steps so far have run, however
// slow they are.
func TestSettleWaitsForCallbacks(t *testing.T) {
	var offline atomic.Int32
	release := make(chan struct{})
	tr, err := New(Config[string]{
		Slots: 2,
		OnOffline: func(string) {
			<-release
			offline.Add(1)
		},
	})
	require.NoError(t, err)
	defer tr.Close()
	tr.Touch("a")
	tr.Touch("b")
	tr.Advance()
	tr.Advance()
	settled := make(chan struct{})
	go func() {
		tr.Settle()
		close(settled)
	}()
	select {
	case <-settled:
		t.Fatal("Settle returned while a callback was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-settled
	assert.EqualValues(t, 2, offline.Load())
	tr.Settle() // nothing pending: at once
}

// After churn the tables give their memory back, and the keys that stayed
// keep their timing exactly.
func TestTablesShrinkAfterChurn(t *testing.T) {
	tr, err := New(Config[int]{Slots: 5})
	require.NoError(t, err)
	defer tr.Close()
	size := func() int {
		n := 0
		for i := range tr.shards {
			if tb := tr.shards[i].tab.Load(); tb != nil {
				n += len(tb.entries)
			}
		}
		return n
	}
	const many = 100_000
	for k := range many {
		tr.Touch(k)
	}
	for k := 0; k < many; k += 2 {
		tr.Remove(k) // half leave by hand
	}
	grown := size()
	tr.Advance()
	tr.Advance()
	for k := 1; k < 200; k += 2 {
		tr.Touch(k) // these stay
	}
	var expired []int
	for range 3 {
		expired = append(expired, tr.Advance()...) // the rest time out at step 5
	}
	assert.Len(t, expired, many/2-100)
	assert.Equal(t, 100, tr.Len())
	shrunk := size()
	assert.Less(t, shrunk, grown/50, "tables of %d slots after churn, %d at the peak", shrunk, grown)
	for step := 6; step <= 10; step++ {
		got := tr.Advance()
		if step != 7 {
			assert.Empty(t, got, "step %d", step)
		} else {
			assert.Len(t, got, 100, "touched after step 2: due at step 7")
		}
	}
	assert.Zero(t, tr.Len())
}

// A removed or expired key is not kept reachable by its tombstone past the
// next step, beyond a bound of 1/16 of the live keys (and minTable) per
// shard: keys that are connections would keep every closed connection's
// state alive.
func TestGoneKeysAreNotKept(t *testing.T) {
	type conn [256]byte // what a closed connection would keep alive
	tr, err := New(Config[*conn]{Slots: 5})
	require.NoError(t, err)
	defer tr.Close()
	var freed atomic.Int64
	add := func(n int) []*conn {
		cs := make([]*conn, n)
		for i := range cs {
			cs[i] = new(conn)
			runtime.AddCleanup(cs[i], func(struct{}) { freed.Add(1) }, struct{}{})
			tr.Touch(cs[i])
		}
		return cs
	}
	const stays, gone = 4000, 4000
	stay := add(stays)
	leave := add(gone / 2)
	silent := add(gone / 2)
	for _, c := range leave {
		tr.Remove(c)
	}
	leave = nil
	tr.Advance()
	for range 4 {
		for _, c := range stay {
			tr.Touch(c)
		}
		if expired := tr.Advance(); len(expired) > 0 {
			assert.Len(t, expired, len(silent))
			silent = nil
		}
	}
	require.Nil(t, silent, "the silent keys timed out")
	kept := 0 // at most, by shards of stays/nShards keys, rounded up
	for range nShards {
		kept += (stays/nShards+1)/16 + minTable
	}
	want := int64(gone - kept)
	if !assert.Eventually(t, func() bool {
		runtime.GC()
		return freed.Load() >= want
	}, 10*time.Second, 10*time.Millisecond) {
		t.Logf("%d of %d gone keys freed, %d wanted", freed.Load(), gone, want)
	}
	assert.Equal(t, stays, tr.Len())
	runtime.KeepAlive(stay)
}
