package cluster

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A claimer remembers the nodes it reaped and the life it ended until told
// to forget them, the oldest first out past maxReaps.
func TestReapsRememberUntilForgotten(t *testing.T) {
	r := make(reaps, 2)
	r.update(1, 100, "a#1 3,b#2 1", "")
	r.update(1, 200, "", "a#1")
	assert.Equal(t, []any{"b#2", int64(1), int64(100)}, r.args(1))
	assert.Empty(t, r.args(0))
	for i := range maxReaps + 5 {
		r.update(0, int64(1000+i), "n"+string(rune('A'+i))+" 1", "")
	}
	assert.Len(t, r[0], maxReaps)
	assert.NotContains(t, r[0], "nA", "the oldest went first")
	assert.Contains(t, r[0], "n"+string(rune('A'+maxReaps+4)))
}

// A loss found after this node went longer than its lease without an
// answer holds its changes two claim rounds past the restore window: a
// claimer may yet say it reaped the node before the loss.
func TestALossAfterALapsedLeaseHoldsLonger(t *testing.T) {
	cfg := Config{Timeout: time.Second, ClaimEvery: 100 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		quiet time.Duration // between the last two answers
		extra time.Duration
	}{
		{name: "answered within the lease", quiet: 500 * time.Millisecond},
		{name: "lease lapsed", quiet: 3 * time.Second, extra: 2 * cfg.ClaimEvery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWriter(&base{cfg: cfg, keys: make([]shardKeys, 1)})
			start := time.Now()
			w.heard(0, start)
			w.heard(0, start.Add(tc.quiet))
			before := time.Now()
			w.lost(0, 300*time.Millisecond)
			assert.True(t, w.restore[0])
			held := w.holdUntil.Sub(before)
			assert.GreaterOrEqual(t, held, 300*time.Millisecond+tc.extra)
			assert.Less(t, held, 300*time.Millisecond+tc.extra+time.Second)
		})
	}
}

// A claim tells every shard of the nodes found dead in any, once, and runs
// again the shards that were not told yet.
func TestDeadNodesAreToldToEveryShard(t *testing.T) {
	d := make(deadNodes, 3)
	assert.Empty(t, d.tell(0))
	d.found(0, "x#1")
	assert.ElementsMatch(t, []int{1, 2}, d.untold(nil), "shards 1 and 2 do not know of x#1")
	assert.Equal(t, "x#1", d.tell(1))
	d.found(2, "x#1,y#2")
	assert.ElementsMatch(t, []int{0, 1}, d.untold([]int{1}), "y#2 is news to 0 and 1")
	assert.Equal(t, "x#1,y#2", d.tell(0))
	assert.Equal(t, "x#1,y#2", d.tell(1))
	assert.Empty(t, d.untold(nil))
}

// A held record that could not be written again is queued as what the node
// holds now, not as it was held: a tab closed while the node was taken for
// dead, its change already on its way, is not written back online after it.
func TestRequeuedHeldRecordsAreWhatTheNodeHoldsNow(t *testing.T) {
	met, err := newMetrics(prometheus.NewRegistry(), "")
	require.NoError(t, err)
	w := newWriter(&base{m: met, keys: make([]shardKeys, 4)}) // no loop: the test is the loop
	w.setUser("u", 1, 0)
	w.setMember("room", "u", true, false)
	w.pending.take(w.counted) // written: held
	w.setUser("u", 0, 0)
	w.setMember("room", "u", false, false)
	w.pending.take(w.counted) // on its way
	w.requeueHeld([]record{u("u", 1, 0), m("room", "u", 1, 0)})
	assert.Equal(t, []string{"[/u=0.0 room/u=0.0]"}, roundsOf(w.pending.take(w.counted)[0].rounds))
}
