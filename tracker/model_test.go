package tracker

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// model is the plain reference the ring is checked against: a map of
// deadlines, scanned in full at every step.
type model struct {
	slots, idleSteps, now int64
	keys                  map[string]*modelKey
}

type modelKey struct {
	seen, ttl int64
	idled     bool
}

func (m *model) touch(key string, ttl int64) (added bool) {
	k, ok := m.keys[key]
	if !ok {
		k = &modelKey{}
		m.keys[key] = k
	}
	if k.seen != m.now || k.ttl != ttl {
		*k = modelKey{seen: m.now, ttl: ttl}
	}
	return !ok
}

func (m *model) advance() (expired, idled []string) {
	m.now++
	for key, k := range m.keys {
		switch {
		case k.seen+k.ttl <= m.now:
			delete(m.keys, key)
			expired = append(expired, key)
		case m.idleSteps > 0 && m.idleSteps < k.ttl && !k.idled && k.seen+m.idleSteps <= m.now:
			k.idled = true
			idled = append(idled, key)
		}
	}
	return expired, idled
}

func (m *model) due() []int {
	due := make([]int, m.slots)
	for _, k := range m.keys {
		due[(k.seen+k.ttl-1)%m.slots]++
	}
	return due
}

// checkOps runs the operations that data encodes on a Tracker and on the
// model, and compares them after every operation.
func checkOps(t *testing.T, data []byte) {
	if len(data) < 2 {
		return
	}
	slots := 2 + int(data[0]%8)
	tick := time.Second
	var idleAfter time.Duration
	if data[1]%2 == 1 && slots > 2 {
		idleAfter = time.Duration(int(data[1]/2)%(slots-2)) * tick
	}
	data = data[2:]

	var r recorder
	cfg := r.config(slots)
	cfg.Tick = tick
	cfg.IdleAfter = idleAfter
	tr, err := New(cfg)
	require.NoError(t, err)
	defer tr.Close()
	m := &model{slots: int64(slots), keys: map[string]*modelKey{}}
	if idleAfter > 0 {
		m.idleSteps = ceilSteps(idleAfter, tick) + 1
	}
	keys := []string{"a", "b", "c", "d", "e"}

	for i := 0; i < len(data); i++ {
		op, key := data[i]%6, keys[int(data[i]/6)%len(keys)]
		var want []string
		switch op {
		case 0, 1:
			added := tr.Touch(key)
			require.Equal(t, m.touch(key, m.slots), added, "Touch(%s) at op %d", key, i)
			if added {
				want = []string{"online:" + key}
			}
		case 2:
			// The next byte picks a timeout: quarters of a tick, up to 64 ticks, many turns of a small ring.
			var d time.Duration
			if i+1 < len(data) {
				i++
				d = time.Duration(data[i]) * tick / 4
			}
			added := tr.TouchFor(key, d)
			require.Equal(t, m.touch(key, ceilSteps(d, tick)+1), added, "TouchFor(%s, %v) at op %d", key, d, i)
			if added {
				want = []string{"online:" + key}
			}
		case 3:
			_, ok := m.keys[key]
			delete(m.keys, key)
			require.Equal(t, ok, tr.Remove(key), "Remove(%s) at op %d", key, i)
		default:
			expired, idled := m.advance()
			got := tr.Advance()
			require.ElementsMatch(t, expired, got, "Advance at step %d (op %d)", m.now, i)
			for _, k := range idled {
				want = append(want, "idle:"+k)
			}
			for _, k := range expired {
				want = append(want, "offline:"+k)
			}
		}
		tr.drain()
		require.Equal(t, sorted(want), sorted(r.take()), "callbacks after op %d", i)
		require.Equal(t, len(m.keys), tr.Len(), "Len after op %d", i)
		for _, k := range keys {
			_, ok := m.keys[k]
			require.Equal(t, ok, tr.Online(k), "Online(%s) after op %d", k, i)
		}
		ring := tr.Ring()
		require.Equal(t, int(m.now%m.slots), ring.Cursor)
		require.Equal(t, m.due(), ring.Due, "Due after op %d", i)
	}
	// Drain the ring: everything left expires, exactly once.
	for range 70 {
		expired, _ := m.advance()
		require.ElementsMatch(t, expired, tr.Advance(), "draining at step %d", m.now)
	}
	require.Zero(t, tr.Len())
}

func TestModel(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		data := make([]byte, 2+rng.IntN(400))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		// Bias towards steps so keys actually expire and idle.
		for i := 2; i < len(data); i += 3 {
			data[i] = data[i] - data[i]%6 + 4
		}
		t.Run("", func(t *testing.T) {
			checkOps(t, data)
		})
	}
}

func FuzzOps(f *testing.F) {
	f.Add([]byte{5, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4})
	f.Add([]byte{0, 1, 0, 6, 2, 7, 4, 4, 4, 3, 4})
	f.Add([]byte{7, 9, 2, 40, 8, 4, 2, 1, 4, 4, 1, 4, 4, 4, 4, 4, 4, 4})
	f.Add([]byte{3, 5, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 4, 4, 4, 4, 4})
	f.Add([]byte{2, 0, 2, 255, 4, 4, 2, 0, 4, 4, 4})
	f.Fuzz(checkOps)
}

// TestModelGrowing checks the ring against the model while shards' tables
// grow (rehash) and churn (tombstones, revived keys) under scheduled entries.
func TestModelGrowing(t *testing.T) { testModelChurn(t, func(int) int { return 150 }) }

// The same while the key count grows to thousands and falls back to a few,
// again and again, so tables grow and shrink under the model's eye.
func TestModelGrowingAndShrinking(t *testing.T) {
	testModelChurn(t, func(step int) int {
		if step%20 < 8 {
			return 800
		}
		return 3
	})
}

// testModelChurn runs 60 steps of random touches and removes, ops(step) of
// them before each step, against the model.
func testModelChurn(t *testing.T, ops func(step int) int) {
	var r recorder
	cfg := r.config(7)
	cfg.IdleAfter = 2 * time.Second
	tr, err := New(cfg)
	require.NoError(t, err)
	defer tr.Close()
	m := &model{slots: 7, idleSteps: ceilSteps(cfg.IdleAfter, time.Second) + 1, keys: map[string]*modelKey{}}
	rng := rand.New(rand.NewPCG(7, 7))
	for step := range 60 {
		for range ops(step) {
			k := fmt.Sprintf("k%d", rng.IntN(3000))
			switch rng.IntN(10) {
			case 0:
				_, ok := m.keys[k]
				delete(m.keys, k)
				require.Equal(t, ok, tr.Remove(k))
			case 1:
				d := time.Duration(rng.IntN(40)) * time.Second / 2
				require.Equal(t, m.touch(k, ceilSteps(d, time.Second)+1), tr.TouchFor(k, d))
			default:
				require.Equal(t, m.touch(k, m.slots), tr.Touch(k))
			}
		}
		expired, idled := m.advance()
		require.ElementsMatch(t, expired, tr.Advance(), "step %d", step+1)
		tr.drain()
		var gotIdle []string
		for _, ev := range r.take() {
			if k, ok := strings.CutPrefix(ev, "idle:"); ok {
				gotIdle = append(gotIdle, k)
			}
		}
		require.ElementsMatch(t, idled, gotIdle, "idle at step %d", step+1)
		require.Equal(t, len(m.keys), tr.Len())
	}
}
