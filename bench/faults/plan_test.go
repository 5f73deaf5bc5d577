package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePlan(t *testing.T) {
	tests := []struct {
		in   string
		want []step
		err  string // a part of the error; "" for none
	}{
		{in: "redis-stop:6s*3", want: []step{{kind: redisStop, node: -1, dur: 6 * time.Second, count: 3}}},
		{in: "link-stall@B:7s*3", want: []step{{kind: linkStall, node: 1, dur: 7 * time.Second, count: 3}}},
		{in: "node-kill", want: []step{{kind: nodeKill, node: -1, count: 1}}},
		{in: "redis-flush*2, node-stop-long@C", want: []step{
			{kind: redisFlush, node: -1, count: 2}, {kind: nodeStopLong, node: 2, count: 1}}},
		{in: "cluster-failover@A*2", want: []step{{kind: clusterFailover, node: 0, count: 2}}},
		{in: "", err: `step 1 "": kind ""`},
		{in: "redis-stop:6s,", err: `step 2 "": kind ""`},
		{in: "redis-freeze:6s", err: `kind "redis-freeze": want one of`},
		{in: "redis-stop:6s*0", err: `count "0"`},
		{in: "redis-stop:6s*x", err: `count "x"`},
		{in: "redis-stop:6s*3*2", err: `count "3*2"`},
		{in: "redis-stop:6", err: `duration "6"`},
		{in: "redis-stop:-1s", err: `duration "-1s"`},
		{in: "redis-stop:2h", err: `duration "2h"`},
		{in: "redis-flush:1s", err: `duration "1s": redis-flush takes none`},
		{in: "redis-stop@A:6s", err: `node "A": redis-stop hits no one node`},
		{in: "link-stall@D:7s", err: `node "D": want a letter from A to C`},
		{in: "link-stall@b", err: `node "b"`},
		{in: "link-stall@:7s", err: `node ""`},
		{in: "link-stall:7s@B", err: `duration "7s@B"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parsePlan(tt.in, nodes)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestPlanned(t *testing.T) {
	steps, err := parsePlan("link-stall@B:7s*3,redis-stop*2,node-kill@A", nodes)
	require.NoError(t, err)
	gap := [2]time.Duration{10 * time.Second, 30 * time.Second}
	fs := planned(5, steps, nodes, warmup, gap)
	require.Len(t, fs, 6)
	for i, f := range fs[:3] {
		assert.Equal(t, linkStall, f.kind)
		assert.Equal(t, 1, f.node)
		assert.Equal(t, 7*time.Second, f.dur)
		if i == 0 {
			assert.Equal(t, warmup, f.wait)
		}
	}
	for _, f := range fs[3:5] {
		assert.Equal(t, redisStop, f.kind)
		assert.GreaterOrEqual(t, f.dur, durations[redisStop][0])
		assert.Less(t, f.dur, durations[redisStop][1])
	}
	assert.Equal(t, nodeKill, fs[5].kind)
	assert.Equal(t, 0, fs[5].node)
	for _, f := range fs[1:] {
		assert.GreaterOrEqual(t, f.wait, gap[0])
		assert.Less(t, f.wait, gap[1])
	}
	assert.Equal(t, fs, planned(5, steps, nodes, warmup, gap), "a seed gives one schedule")
	assert.Equal(t, []kind{linkStall, redisStop, nodeKill}, plannedKinds(steps))
}

// format writes steps back in the form parsePlan reads.
func format(steps []step) string {
	var items []string
	for _, st := range steps {
		s := string(st.kind)
		if st.node >= 0 {
			s += "@" + nodeName(st.node)
		}
		if st.dur > 0 {
			s += ":" + st.dur.String()
		}
		items = append(items, fmt.Sprintf("%s*%d", s, st.count))
	}
	return strings.Join(items, ",")
}

func FuzzParsePlan(f *testing.F) {
	for _, s := range []string{"redis-stop:6s*3", "link-stall@B:7s*3,node-kill", "redis-flush*2", "slot-migrate@C", ":*@,", "node-term:1.5s*1000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		steps, err := parsePlan(s, nodes)
		if err != nil {
			assert.Contains(t, err.Error(), "schedule step ")
			return
		}
		require.NotEmpty(t, steps)
		for _, st := range steps {
			assert.True(t, allKinds[st.kind], "kind %q", st.kind)
			assert.True(t, st.count >= 1 && st.count <= maxCount, "count %d", st.count)
			assert.True(t, st.node >= -1 && st.node < nodes, "node %d", st.node)
			assert.True(t, st.dur >= 0 && st.dur <= time.Hour, "duration %v", st.dur)
		}
		again, err := parsePlan(format(steps), nodes)
		require.NoError(t, err, "%q, read as %q", s, format(steps))
		assert.Equal(t, steps, again, "%q, read as %q", s, format(steps))
	})
}
