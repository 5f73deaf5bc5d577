package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// edges makes one accepted POST of events ("type@seconds") for uid.
func edges(id, uid string, evs ...string) post {
	p := post{got: t0, id: id, status: 204, body: id}
	for i, ev := range evs {
		typ, at, _ := strings.Cut(ev, "@")
		s, err := strconv.ParseFloat(at, 64)
		if err != nil {
			panic(ev)
		}
		p.events = append(p.events, event{ID: fmt.Sprintf("%s_%d", id, i), Type: typ, UID: uid, At: sec(s).UnixMilli()})
	}
	return p
}

func TestCheck(t *testing.T) {
	gone := []interval{{uid: "u", node: 0, from: sec(1), to: sec(10)}}
	stays := []interval{{uid: "u", node: 0, from: sec(1), to: sec(60)}}
	hit := func(k kind, node int, from, to float64) *fault {
		return &fault{kind: k, node: node, start: sec(from), end: sec(to), finished: true}
	}
	tests := []struct {
		name   string
		ivs    []interval
		posts  []post
		faults []*fault
		want   []string
	}{
		{"clean", gone, []post{edges("w1", "u", "online@1.1", "offline@10.1")}, nil, nil},
		{"repeated online", gone, []post{edges("w1", "u", "online@1.1", "online@2.0", "offline@10.1")}, nil,
			[]string{"repeated online"}},
		{"offline first", nil, []post{edges("w1", "u", "offline@1.1")}, nil, []string{"repeated offline"}},
		{"missing online", gone, nil, nil, []string{"missing on"}},
		{"online too late to count", gone, []post{edges("w1", "u", "online@12.5", "offline@12.6")}, nil, []string{"missing on"}},
		{"false offline on a healthy node", stays, []post{edges("w1", "u", "online@1.1", "offline@5")}, nil,
			[]string{"false offline", "final state"}},
		{"offline while its node is cut off, back after", stays,
			[]post{edges("w1", "u", "online@1.1", "offline@5", "online@7")}, []*fault{hit(linkCut, 0, 4, 6)}, nil},
		{"offline while another node is cut off", stays,
			[]post{edges("w1", "u", "online@1.1", "offline@5", "online@7")}, []*fault{hit(linkCut, 1, 4, 6)},
			[]string{"false offline"}},
		{"offline during a Cluster failover", stays,
			[]post{edges("w1", "u", "online@1.1", "offline@5", "online@7")}, []*fault{hit(clusterFailover, 0, 4, 6)},
			[]string{"false offline"}},
		{"offline while Redis is frozen", stays,
			[]post{edges("w1", "u", "online@1.1", "offline@5", "online@7")}, []*fault{hit(redisStop, 1, 4, 6)}, nil},
		{"never back after a fault", stays, []post{edges("w1", "u", "online@1.1", "offline@2.5")},
			[]*fault{hit(nodeStopLong, 0, 2, 3)}, []string{"final state", "not recovered"}},
		{"back, the next fault too soon to judge", stays,
			[]post{edges("w1", "u", "online@1.1", "offline@2.5", "online@14")},
			[]*fault{hit(nodeStopLong, 0, 2, 3), hit(redisFlush, 0, 5, 5)}, nil},
		{"a batch sent again is counted once", gone,
			[]post{edges("w1", "u", "online@1.1"), edges("w1", "u", "online@1.1"), edges("w2", "u", "offline@10.1")}, nil, nil},
		{"a refused batch is not counted", gone,
			[]post{func() post { p := edges("w1", "u", "online@1.1"); p.status = 503; return p }(),
				edges("w1", "u", "online@1.1"), edges("w2", "u", "offline@10.1")}, nil, nil},
		{"a batch changed under its webhook-id", gone,
			[]post{edges("w1", "u", "online@1.1"), func() post { p := edges("w1", "u", "online@1.1"); p.body = "other"; return p }(),
				edges("w2", "u", "offline@10.1")}, nil, []string{"batch changed"}},
		{"a bad signature", gone,
			[]post{{got: sec(1), id: "w0", status: 401, err: "no valid v1 signature"}, edges("w1", "u", "online@1.1"), edges("w2", "u", "offline@10.1")},
			nil, []string{"bad post"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &history{start: t0, end: sec(60), ivs: tt.ivs, posts: tt.posts, faults: tt.faults}
			var got []string
			for _, a := range h.check() {
				got = append(got, a.kind)
			}
			slices.Sort(got)
			got = slices.Compact(got)
			assert.Equal(t, tt.want, got, h.report(1, "test"))
		})
	}
}

// A membership is checked like a user: a join while joined is repeated.
func TestCheckMemberships(t *testing.T) {
	ivs := []interval{{uid: "u", node: 0, channels: []string{"ch0"}, from: sec(1), to: sec(10)}}
	p := edges("w1", "u", "online@1.1", "offline@10.1")
	p.events = append(p.events,
		event{ID: "j1", Type: "join", Channel: "ch0", UID: "u", At: sec(1.1).UnixMilli()},
		event{ID: "j2", Type: "join", Channel: "ch0", UID: "u", At: sec(2).UnixMilli()},
		event{ID: "l1", Type: "leave", Channel: "ch0", UID: "u", At: sec(10.1).UnixMilli()})
	h := &history{start: t0, end: sec(60), ivs: ivs, posts: []post{p}}
	found := h.check()
	if assert.Len(t, found, 1) {
		assert.Equal(t, "u@ch0", found[0].key)
		assert.Equal(t, "repeated join", found[0].kind)
	}
}

// An offline while the user's only tab is within a fault's reach is
// counted, not judged, if the user stayed connected since before the
// fault; one on a healthy node is an anomaly, not counted.
func TestCheckCountsOffsInAFaultsReach(t *testing.T) {
	stays := []interval{{uid: "u", node: 0, from: sec(1), to: sec(60)}}
	p := edges("w1", "u", "online@1.1", "offline@5", "online@7")
	tests := []struct {
		name   string
		fault  *fault
		counts int
		found  int
	}{
		{"its node cut off", &fault{kind: linkCut, node: 0, start: sec(4), end: sec(6), finished: true}, 1, 0},
		{"another node cut off", &fault{kind: linkCut, node: 1, start: sec(4), end: sec(6), finished: true}, 0, 1},
	}
	moved := []interval{{uid: "u", node: 0, from: sec(0), to: sec(2.5)}, {uid: "u", node: 1, from: sec(2.8), to: sec(60)}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &history{start: t0, end: sec(60), ivs: stays, posts: []post{p}, faults: []*fault{tt.fault}}
			assert.Len(t, h.check(), tt.found)
			assert.Equal(t, tt.counts, h.counted.offInReach)
		})
	}
	t.Run("a departure learnt late", func(t *testing.T) {
		h := &history{start: t0, end: sec(60), ivs: moved, posts: []post{p}, faults: []*fault{{kind: redisStop, start: sec(2), end: sec(4.5), finished: true}}}
		assert.Empty(t, h.check())
		assert.Zero(t, h.counted.offInReach)
	})
}

func TestSchedule(t *testing.T) {
	kinds := modeKinds["single"]
	a := schedule(7, kinds, 3, 5*time.Second, 10*time.Minute, [2]time.Duration{10 * time.Second, 30 * time.Second})
	b := schedule(7, kinds, 3, 5*time.Second, 10*time.Minute, [2]time.Duration{10 * time.Second, 30 * time.Second})
	assert.Equal(t, a, b, "one seed, one schedule")
	count := map[kind]int{}
	for i, f := range a {
		count[f.kind]++
		if i > 0 {
			assert.True(t, f.wait >= 10*time.Second && f.wait < 30*time.Second, "fault %d waits %v", i, f.wait)
		}
		d := durations[f.kind]
		assert.True(t, f.dur >= d[0] && (f.dur < d[1] || d[0] == d[1]), "%s lasts %v", f.kind, f.dur)
	}
	for _, k := range kinds {
		assert.GreaterOrEqual(t, count[k], 2, "%s drawn in 10 minutes", k)
	}
	assert.NotEqual(t, a, schedule(8, kinds, 3, 5*time.Second, 10*time.Minute, [2]time.Duration{10 * time.Second, 30 * time.Second}))
}

// Edges of one millisecond are taken in the order that alternates, when
// there is one; two of one kind stay a repeat.
func TestAlternateTies(t *testing.T) {
	ev := func(typ string, at int64) event { return event{Type: typ, At: at} }
	tests := []struct {
		name     string
		in, want []event
	}{
		{"on, then off and on in one ms", []event{ev("online", 1), ev("online", 5), ev("offline", 5)},
			[]event{ev("online", 1), ev("offline", 5), ev("online", 5)}},
		{"already alternating", []event{ev("online", 1), ev("offline", 1), ev("online", 1)},
			[]event{ev("online", 1), ev("offline", 1), ev("online", 1)}},
		{"a repeat stays", []event{ev("online", 1), ev("online", 1), ev("offline", 2)},
			[]event{ev("online", 1), ev("online", 1), ev("offline", 2)}},
		{"off first in its ms", []event{ev("offline", 3), ev("online", 3)},
			[]event{ev("online", 3), ev("offline", 3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alternateTies(tt.in)
			assert.Equal(t, tt.want, tt.in)
		})
	}
}
