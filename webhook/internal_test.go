package webhook

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ring behaves as a slice that drops from its front past the limit,
// through growth, wrap-around, drops and shrinking.
func TestRingModel(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, limit := range []int{1, 3, 64, 100, 700} {
		r := ring{limit: limit}
		var model []Event
		next := 0
		for step := 0; step < 2000; step++ {
			if rnd.IntN(3) > 0 {
				evs := make([]Event, rnd.IntN(2*limit+2))
				for i := range evs {
					evs[i] = Event{At: int64(next)}
					next++
				}
				model = append(model, evs...)
				wantDrop := max(0, len(model)-limit)
				model = model[wantDrop:]
				require.Equal(t, wantDrop, r.push(evs), "limit %d step %d: dropped", limit, step)
			} else {
				k := rnd.IntN(limit + 2)
				got := r.pop(k)
				want := model[:min(k, len(model))]
				model = model[len(want):]
				if len(want) == 0 {
					require.Empty(t, got, "limit %d step %d", limit, step)
				} else {
					require.Equal(t, want, got, "limit %d step %d", limit, step)
				}
			}
			require.Equal(t, len(model), r.n, "limit %d step %d: length", limit, step)
			require.LessOrEqual(t, len(r.buf), limit, "limit %d: buffer past the limit", limit)
		}
	}
}

// Slots a ring no longer holds are cleared, and a big emptied ring lets its
// buffer go.
func TestRingReleases(t *testing.T) {
	r := ring{limit: 10_000}
	evs := make([]Event, 10_000)
	for i := range evs {
		evs[i] = Event{UID: "u", At: int64(i)}
	}
	r.push(evs)
	require.Len(t, r.pop(9_999), 9_999)
	for i, e := range r.buf {
		if i != r.head {
			require.Zero(t, e, "slot %d kept", i)
		}
	}
	r.pop(1)
	assert.Nil(t, r.buf)
}

// The backoff grows from MinBackoff, is jittered, never passes MaxBackoff
// and does not overflow after many failures.
func TestBackoff(t *testing.T) {
	s := &Sender{minWait: 100 * time.Millisecond, maxWait: 30 * time.Second}
	for n := 1; n < 200; n++ {
		ceiling := 30 * time.Second
		if n < 20 {
			ceiling = min(ceiling, 100*time.Millisecond<<n)
		}
		seen := map[time.Duration]bool{}
		for range 50 {
			d := s.backoff(n)
			require.GreaterOrEqual(t, d, s.minWait, "failure %d", n)
			require.LessOrEqual(t, d, ceiling, "failure %d", n)
			seen[d] = true
		}
		assert.Greater(t, len(seen), 1, "failure %d: no jitter", n)
	}
	same := &Sender{minWait: time.Second, maxWait: time.Second}
	assert.Equal(t, time.Second, same.backoff(3))
}
