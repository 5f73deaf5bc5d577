package tracker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// The benchmarks run at a million keys touched in random order, so every
// figure includes the cache misses of a real population. Run them with
//
//	go test -run '^$' -bench . -benchmem -cpu 1,2 ./tracker/
//
// BenchmarkFloor is the bound a keepalive cannot beat: a lookup in a
// read-only map plus an atomic store on the same keys.

const benchKeys = 1 << 20

var (
	keysOnce  sync.Once
	benchKeyS []string
	benchPerm []int32
)

func keys1M() ([]string, []int32) {
	keysOnce.Do(func() {
		benchKeyS = make([]string, benchKeys)
		for i := range benchKeyS {
			benchKeyS[i] = fmt.Sprintf("user-%07d", i)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		benchPerm = make([]int32, benchKeys)
		for i, p := range rng.Perm(benchKeys) {
			benchPerm[i] = int32(p)
		}
	})
	return benchKeyS, benchPerm
}

// filled returns a default tracker holding the million keys.
func filled(b *testing.B) *Tracker[string] {
	keys, _ := keys1M()
	tr, err := New(Config[string]{})
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range keys {
		tr.Touch(k)
	}
	return tr
}

func BenchmarkTouch(b *testing.B) {
	keys, perm := keys1M()
	tr := filled(b)
	defer tr.Close()
	var next atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine walks the permutation from its own offset.
		i := int(next.Add(1)) * (benchKeys / 7)
		for pb.Next() {
			tr.Touch(keys[perm[i&(benchKeys-1)]])
			i++
		}
	})
}

// BenchmarkTouchMoving touches keys while the deadline moves every step, so
// every keepalive stores (in BenchmarkTouch most keepalives of a key land in
// the same step and only load).
func BenchmarkTouchMoving(b *testing.B) {
	keys, perm := keys1M()
	tr := filled(b)
	defer tr.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i&(benchKeys-1) == 0 {
			b.StopTimer()
			tr.Advance()
			b.StartTimer()
		}
		tr.Touch(keys[perm[i&(benchKeys-1)]])
	}
}

func BenchmarkFloor(b *testing.B) {
	keys, perm := keys1M()
	m := make(map[string]*atomic.Int64, len(keys))
	for _, k := range keys {
		m[k] = new(atomic.Int64)
	}
	var next atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * (benchKeys / 7)
		for pb.Next() {
			m[keys[perm[i&(benchKeys-1)]]].Store(int64(i))
			i++
		}
	})
}

// spread fills tr with the million keys spread evenly over the ring, so each
// step has 1/Slots of them due.
func spread(tr *Tracker[string]) int {
	keys, perm := keys1M()
	per := benchKeys/int(tr.slots) + 1
	for i, p := range perm {
		if i > 0 && i%per == 0 {
			tr.Advance()
		}
		tr.Touch(keys[p])
	}
	return per
}

// BenchmarkAdvance measures one step at a million keys: "expire" reports the
// 1/31 of them due in the slot (re-added off the clock, as new logins), and
// "recheck" finds the keys due in the slot touched just before and moves them.
func BenchmarkAdvance(b *testing.B) {
	b.Run("expire", func(b *testing.B) {
		tr, err := New(Config[string]{})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		spread(tr)
		for range tr.slots {
			tr.Touch("")
			for _, k := range tr.Advance() {
				tr.Touch(k)
			}
		}
		var scanned int
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			expired := tr.Advance()
			b.StopTimer()
			scanned += len(expired)
			for _, k := range expired {
				tr.Touch(k)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(scanned)/float64(b.N), "keys/step")
	})
	b.Run("recheck", func(b *testing.B) {
		tr, err := New(Config[string]{})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		per := spread(tr)
		keys, perm := keys1M()
		// Chunk c was added after c steps; keep each chunk alive by touching
		// it just before the step that would report it.
		due := make([]int64, tr.slots)
		for c := range due {
			due[c] = int64(c) + tr.slots
		}
		var scanned int
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			now := tr.now.Load()
			for c := range due {
				if due[c] == now+1 {
					for _, p := range perm[c*per : min((c+1)*per, benchKeys)] {
						tr.Touch(keys[p])
					}
					due[c] = now + tr.slots
					scanned += per
				}
			}
			b.StartTimer()
			if n := len(tr.Advance()); n > 0 {
				b.Fatalf("%d keys expired", n)
			}
		}
		b.ReportMetric(float64(scanned)/float64(b.N), "keys/step")
	})
}

// BenchmarkBytesPerKey reports the heap the tracker grows by per key, key
// bytes excluded (the keys exist before the measurement starts).
func BenchmarkBytesPerKey(b *testing.B) {
	keys, _ := keys1M()
	var perKey float64
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr, err := New(Config[string]{})
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			tr.Touch(k)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / benchKeys
		runtime.KeepAlive(tr)
		tr.Close()
	}
	b.ReportMetric(perKey, "B/key")
}
