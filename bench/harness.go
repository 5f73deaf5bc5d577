package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// options sets the size and length of a run.
type options struct {
	Keys      int           // distinct keys
	Period    int           // steps per timeout (and chunks the keys are spread over)
	Tick      time.Duration // wall time of a step for the clock-driven peers
	BenchTime string        // -test.benchtime for the keepalive benchmarks, e.g. "1s" or "1000x"
	Rounds    int           // times each keepalive benchmark runs; the median is reported
	StepIters int           // timed steps per step benchmark, at most Period-2 (see prepare)
	Seed      uint64
	Progress  io.Writer // where to say what is being measured; io.Discard to be quiet
}

// workload is the key set shared by every subject: keys are made once, so no
// subject's memory figure includes key bytes, and all see the same order.
type workload struct {
	order  []string   // every key once, in a random order: the order keys are added
	chunks [][]string // order cut into Period chunks: the keys of one step
	// touch is every key once in another random order, that of keepalives.
	// Were it the order of adding, memory that a subject allocates per key
	// would be visited in allocation order, sparing it the cache misses
	// that a server's keepalives, which come in no such order, pay.
	touch []string
}

func newWorkload(o options) workload {
	keys := make([]string, o.Keys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(10_000_000+i)
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	permute := func() []string {
		p := make([]string, len(keys))
		for i, j := range rng.Perm(len(keys)) {
			p[i] = keys[j]
		}
		return p
	}
	order, touch := permute(), permute()
	chunks := make([][]string, o.Period)
	for c := range chunks {
		chunks[c] = order[c*len(order)/o.Period : (c+1)*len(order)/o.Period]
	}
	return workload{order: order, chunks: chunks, touch: touch}
}

// result is what the harness measured for one subject. A nil step result
// means the subject cannot be stepped by hand.
type result struct {
	Impl        impl
	BytesPerKey float64
	Touch1      rounds // keepalives at 1 goroutine
	Touch2      rounds // keepalives at 2 goroutines
	StepExpire  *testing.BenchmarkResult
	StepRecheck *testing.BenchmarkResult
	Fired       int64 // expiries reported while keepalives were being measured (should be 0)
	Err         error
}

// session is one subject being measured.
type session struct {
	res     result
	s       subject
	expired atomic.Int64 // keys the subject reported expired
	fired   int64        // expired before the keepalive rounds
	starts  atomic.Int64 // goroutines started by the 2-goroutine benchmark
}

// prepare builds one subject, populates it, measures its memory and, if it
// can be stepped, its steps. Steps come before keepalives because a
// keepalive benchmark touches an arbitrary subset of keys, which would break
// the exact per-step expiry counts that the step benchmarks check.
//
// The re-check benchmark touches the chunk due at step s just before it, so
// the chunk is next due at step s+Period-1, where it would join the chunk
// already due there; it therefore stays within one turn: testing.Benchmark
// runs StepIters+1 steps, at most Period-1.
func prepare(im impl, w workload, o options) *session {
	ss := &session{res: result{Impl: im}}
	cfg := config{Keys: len(w.order), Period: o.Period, Tick: o.Tick, OnExpire: func(string) { ss.expired.Add(1) }}

	before := heapAfterGC()
	s, err := im.New(cfg)
	if err != nil {
		ss.res.Err = err
		return ss
	}
	ss.s = s
	progress(o, im.Name, "populate")
	st, canStep := s.(stepper)
	for c, chunk := range w.chunks {
		for _, k := range chunk {
			s.Add(k)
		}
		// Steps between chunks spread the keys over the ring: the next step
		// after populating expires chunk 0, the one after it chunk 1, ...
		if canStep && c < len(w.chunks)-1 {
			st.Step()
		}
	}
	ss.res.BytesPerKey = float64(int64(heapAfterGC())-int64(before)) / float64(len(w.order))

	if canStep {
		var want int64
		next := 0 // chunk the next step expires or re-checks
		expire := func(b *testing.B) error {
			b.StopTimer()
			for range b.N {
				chunk := w.chunks[next]
				b.StartTimer()
				st.Step()
				b.StopTimer()
				want += int64(len(chunk))
				if err := waitCount(&ss.expired, want); err != nil {
					return fmt.Errorf("step expiring chunk %d: %w", next, err)
				}
				for _, k := range chunk {
					s.Add(k) // back in, due Period steps from now
				}
				next = (next + 1) % len(w.chunks)
			}
			return nil
		}
		recheck := func(b *testing.B) error {
			b.StopTimer()
			for range b.N {
				chunk := w.chunks[next]
				for _, k := range chunk {
					s.Touch(k) // alive: the step must re-check these, not expire them
				}
				b.StartTimer()
				st.Step()
				b.StopTimer()
				next = (next + 1) % len(w.chunks)
			}
			if err := settleCount(&ss.expired, want); err != nil {
				return fmt.Errorf("re-check steps: %w", err)
			}
			return nil
		}
		setBenchTime(strconv.Itoa(o.StepIters) + "x")
		progress(o, im.Name, "step, keys expire")
		re, err := runBench(expire)
		if err != nil {
			ss.fail(err)
			return ss
		}
		ss.res.StepExpire = &re
		progress(o, im.Name, "step, keys re-checked")
		rc, err := runBench(recheck)
		if err != nil {
			ss.fail(err)
			return ss
		}
		ss.res.StepRecheck = &rc
	}
	ss.fired = ss.expired.Load()
	return ss
}

// keepaliveRound runs one round of keepalives at 1 and at 2 goroutines.
// Rounds alternate the two, so a burst of load from other processes lands on
// one round of one of them rather than on all rounds of either.
func (ss *session) keepaliveRound(w workload, o options) {
	s, n := ss.s, len(w.order)
	one := func(b *testing.B) error {
		i := 0
		for range b.N {
			s.Touch(w.touch[i])
			if i++; i == n {
				i = 0
			}
		}
		return nil
	}
	two := func(b *testing.B) error {
		b.SetParallelism(1) // GOMAXPROCS goroutines
		b.RunParallel(func(pb *testing.PB) {
			// Each goroutine walks the same random order from its own
			// place in it, so they rarely touch the same key at once.
			i := int(ss.starts.Add(1)*int64(n/2+1)) % n
			for pb.Next() {
				s.Touch(w.touch[i])
				if i++; i == n {
					i = 0
				}
			}
		})
		return nil
	}
	setBenchTime(o.BenchTime)
	progress(o, ss.res.Impl.Name, fmt.Sprintf("keepalive, round %d of %d", len(ss.res.Touch1)+1, o.Rounds))
	r1, err := runBench(one)
	if err != nil {
		ss.fail(err)
		return
	}
	r2, err := runBench(two)
	if err != nil {
		ss.fail(err)
		return
	}
	ss.res.Touch1 = append(ss.res.Touch1, r1)
	ss.res.Touch2 = append(ss.res.Touch2, r2)
}

func (ss *session) fail(err error) {
	ss.res.Err = err
	ss.close()
}

func (ss *session) close() {
	if ss.s != nil {
		ss.s.Close()
		ss.s = nil
	}
}

// finish closes the subject and returns what was measured.
func (ss *session) finish() result {
	ss.res.Fired = ss.expired.Load() - ss.fired
	ss.close()
	ss.res.Touch1.sort()
	ss.res.Touch2.sort()
	return ss.res
}

// rounds are the results of one benchmark run several times.
type rounds []testing.BenchmarkResult

func (r rounds) sort() {
	slices.SortFunc(r, func(a, b testing.BenchmarkResult) int { return cmp.Compare(ns(a), ns(b)) })
}

// median is the middle round by time (the slower of two); rounds must be sorted.
func (r rounds) median() testing.BenchmarkResult { return r[len(r)/2] }

func ns(r testing.BenchmarkResult) float64 {
	return float64(r.T.Nanoseconds()) / float64(r.N)
}

var started = time.Now()

func progress(o options, name, what string) {
	fmt.Fprintf(o.Progress, "%6.1fs  %-40s %s\n", time.Since(started).Seconds(), name, what)
}

// runBench runs f with testing.Benchmark and returns the error f returned,
// since testing.Benchmark itself discards a benchmark's log and failure.
func runBench(f func(b *testing.B) error) (testing.BenchmarkResult, error) {
	var ferr error // set on the benchmark's goroutine, read after it ended
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		if err := f(b); err != nil {
			ferr = err
			b.FailNow()
		}
	})
	if ferr != nil {
		return r, ferr
	}
	if r.N == 0 {
		return r, errors.New("benchmark did not run")
	}
	return r, nil
}

// setBenchTime sets how long testing.Benchmark runs: a duration or "Nx".
// testing.Init must have run (main and the test binary both do).
func setBenchTime(v string) {
	if err := flag.Set("test.benchtime", v); err != nil {
		panic(fmt.Sprintf("setting test.benchtime to %q: %v", v, err))
	}
}

func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// waitCount waits until c reaches want (expiry callbacks run on other
// goroutines) and fails if it goes past it.
func waitCount(c *atomic.Int64, want int64) error {
	deadline := time.Now().Add(10 * time.Second)
	for c.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d keys expired in all, want %d", c.Load(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
	if got := c.Load(); got != want {
		return fmt.Errorf("%d keys expired in all, want %d", got, want)
	}
	return nil
}

// settleCount is waitCount plus a short quiet period, to catch expiries that
// should not have happened and are still on their way.
func settleCount(c *atomic.Int64, want int64) error {
	if err := waitCount(c, want); err != nil {
		return err
	}
	time.Sleep(50 * time.Millisecond)
	if got := c.Load(); got != want {
		return fmt.Errorf("%d keys expired in all, want %d", got, want)
	}
	return nil
}
