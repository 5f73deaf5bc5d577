package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWorkloadChunksPartitionARandomOrder(t *testing.T) {
	o := options{Keys: 1000, Period: 31, Seed: 7}
	w := newWorkload(o)
	require.Len(t, w.order, o.Keys)
	require.Len(t, w.chunks, o.Period)

	seen := make(map[string]bool, o.Keys)
	total := 0
	for _, c := range w.chunks {
		assert.InDelta(t, o.Keys/o.Period, len(c), 1)
		for _, k := range c {
			assert.False(t, seen[k], "key %q in two chunks", k)
			seen[k] = true
		}
		total += len(c)
	}
	assert.Equal(t, o.Keys, total)
	require.ElementsMatch(t, w.order, w.touch)
	assert.NotEqual(t, w.order, w.touch, "keepalives must not come in the order keys were added")
	assert.Equal(t, w.order, newWorkload(o).order, "same seed, same order")
	assert.NotEqual(t, w.order, newWorkload(options{Keys: 1000, Period: 31, Seed: 8}).order)
	sorted := true
	for i := 1; i < len(w.order); i++ {
		sorted = sorted && w.order[i-1] < w.order[i]
	}
	assert.False(t, sorted, "keys must be touched in a random order, not the order they were made")
}

// TestRunMeasuresEverySubject runs the whole harness on a small key set. The
// step benchmarks check that each steppable subject expires exactly the chunk
// due at each step and nothing when its keys were re-touched, so a broken
// adapter fails here rather than producing a fast, meaningless figure.
func TestRunMeasuresEverySubject(t *testing.T) {
	o := options{Keys: 3100, Period: 31, Tick: time.Second, BenchTime: "300x", Rounds: 2, StepIters: 29, Seed: 1, Progress: io.Discard}
	results := run(o, "")
	require.Len(t, results, len(impls))
	for i, r := range results {
		require.NoError(t, r.Err, r.Impl.Name)
		assert.Equal(t, impls[i].Name, r.Impl.Name)
		require.Len(t, r.Touch1, o.Rounds, r.Impl.Name)
		require.Len(t, r.Touch2, o.Rounds, r.Impl.Name)
		assert.Equal(t, 300, r.Touch1.median().N, r.Impl.Name)
		assert.LessOrEqual(t, ns(r.Touch1[0]), ns(r.Touch1[1]), "rounds sorted by time")
		assert.Positive(t, r.BytesPerKey, r.Impl.Name)
		assert.Zero(t, r.Fired, "%s: keys expired while keepalives were measured", r.Impl.Name)

		s, err := r.Impl.New(config{Keys: 1, Period: o.Period, Tick: o.Tick, OnExpire: func(string) {}})
		require.NoError(t, err)
		_, canStep := s.(stepper)
		s.Close()
		if canStep {
			require.NotNil(t, r.StepExpire, r.Impl.Name)
			require.NotNil(t, r.StepRecheck, r.Impl.Name)
			assert.Equal(t, o.StepIters, r.StepExpire.N, r.Impl.Name)
			assert.Equal(t, o.StepIters, r.StepRecheck.N, r.Impl.Name)
		} else {
			assert.Nil(t, r.StepExpire, r.Impl.Name)
			assert.Nil(t, r.StepRecheck, r.Impl.Name)
		}
	}

	var out bytes.Buffer
	writeReport(&out, o, results, time.Second)
	report := out.String()
	for _, im := range impls {
		assert.Contains(t, report, "| "+im.Name+" |")
	}
	assert.Contains(t, report, "| Touch within 1.25x of the floor, 2 goroutines |")
	assert.Contains(t, report, "| at most 64 bytes per key |")
	assert.Equal(t, 4, strings.Count(report, "| n/a | n/a |"), "the floor, the two timer maps and RussellLuo cannot be stepped: %s", report)
}

// TestClockSubjectsExpireSilentKeys checks the subjects that expire on the
// wall clock, which the harness never lets fire: a key kept alive stays, a
// silent one is reported once its timeout has passed.
func TestClockSubjectsExpireSilentKeys(t *testing.T) {
	for _, im := range impls {
		s, err := im.New(config{Keys: 2, Period: 5, Tick: 10 * time.Millisecond, OnExpire: func(string) {}})
		require.NoError(t, err)
		_, canStep := s.(stepper)
		s.Close()
		if canStep || strings.HasPrefix(im.Name, "floor") {
			continue
		}
		t.Run(im.Name, func(t *testing.T) {
			expired := make(chan string, 2)
			c := config{Keys: 2, Period: 5, Tick: 10 * time.Millisecond, OnExpire: func(k string) { expired <- k }}
			s, err := im.New(c)
			require.NoError(t, err)
			defer s.Close()

			start := time.Now()
			s.Add("alive")
			s.Add("silent")
			keep := time.NewTicker(c.Tick / 2)
			defer keep.Stop()
			timeout := time.After(5 * time.Second)
			for {
				select {
				case k := <-expired:
					require.Equal(t, "silent", k)
					// RussellLuo rounds an expiry down to its tick.
					assert.GreaterOrEqual(t, time.Since(start), c.timeout()-c.Tick)
					return
				case <-keep.C:
					s.Touch("alive")
				case <-timeout:
					require.FailNow(t, "the silent key never expired")
				}
			}
		})
	}
}
