package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/bench/internal/child"
)

// ev makes an event from "type:uid" or "type:uid@channel".
func ev(id int, s string) event {
	typ, key, _ := strings.Cut(s, ":")
	uid, ch, _ := strings.Cut(key, "@")
	return event{ID: fmt.Sprint("e", id), Type: typ, UID: uid, Channel: ch, At: sec(float64(id)).UnixMilli()}
}

func TestReplayStateApply(t *testing.T) {
	type snap struct {
		users   []string
		members map[string][]string
	}
	tests := []struct {
		name   string
		from   *snap // nil: the empty log's start
		events []string
		broken []string // kinds, in order
		on     []string // keys on at the end
	}{
		{"a user comes and goes", nil, []string{"online:u", "join:u@a", "leave:u@a", "offline:u"}, nil, nil},
		{"away, active and update change nothing", nil, []string{"online:u", "away:u", "active:u", "update:u", "join:u@a"}, nil, []string{"u", "u@a"}},
		{"online twice", nil, []string{"online:u", "online:u"}, []string{"repeated online"}, []string{"u"}},
		{"offline first", nil, []string{"offline:u"}, []string{"repeated offline"}, nil},
		{"offline before its leave", nil, []string{"online:u", "join:u@a", "offline:u", "leave:u@a"},
			[]string{"offline before leave", "leave while offline"}, nil},
		{"join before online", nil, []string{"join:u@a", "online:u"}, []string{"join while offline"}, []string{"u", "u@a"}},
		{"leave twice", nil, []string{"online:u", "join:u@a", "leave:u@a", "leave:u@a"}, []string{"repeated leave"}, []string{"u"}},
		{"after a snapshot a user's first edge must change it", &snap{[]string{"u"}, nil}, []string{"online:u"},
			[]string{"repeated online"}, []string{"u"}},
		{"after a snapshot a membership's first edge may repeat a page", &snap{[]string{"u"}, map[string][]string{"a": {"u"}}},
			[]string{"join:u@a", "leave:u@a", "offline:u"}, nil, nil},
		{"after a snapshot a membership is judged from its first edge", &snap{[]string{"u"}, map[string][]string{"a": {"u"}}},
			[]string{"leave:u@a", "leave:u@a"}, []string{"repeated leave"}, []string{"u"}},
		{"a membership a page holds is not known to block an offline", &snap{[]string{"u"}, map[string][]string{"a": {"u"}}},
			[]string{"offline:u"}, nil, []string{"u@a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newReplayState()
			if tt.from != nil {
				s.reset(tt.from.users, tt.from.members)
			}
			var broken []string
			for i, e := range tt.events {
				for _, b := range s.apply(ev(i, e)) {
					broken = append(broken, b[0])
				}
			}
			assert.Equal(t, tt.broken, broken)
			var on []string
			for k := range s.keys() {
				on = append(on, k)
			}
			slices.Sort(on)
			assert.Equal(t, tt.on, on)
		})
	}
}

// TestReplayerCatchesUp runs the replayer against a real presenced in
// memory mode whose log keeps 8 edges: it follows the log, misses more than
// the log keeps (or the server restarts, and its new log cannot vouch for
// the cursor), gets a 410, takes a snapshot and reads on, and its state
// is the server's each time.
func TestReplayerCatchesUp(t *testing.T) {
	ctx, bin, _, _ := processes(t, "runs presenced", 2*time.Minute)
	const key = "replay-test-key"
	dir := t.TempDir()
	addr, err := child.FreePort()
	require.NoError(t, err)
	start := func() *child.Proc {
		p, err := child.Start("presenced", bin, []string{"-addr", addr, "-tick", tick.String(), "-slots", fmt.Sprint(slots),
			"-api-key", key, "-events-max", "8"}, filepath.Join(dir, "presenced.log"))
		require.NoError(t, err)
		require.NoError(t, p.WaitHTTP("http://"+addr+"/healthz", 30*time.Second))
		return p
	}
	p := start()
	t.Cleanup(func() { p.Stop(5 * time.Second) })

	conns := map[string]*websocket.Conn{}
	open := func(uid string, chans ...string) {
		ws, err := connect(addr, uid, chans)
		require.NoError(t, err)
		conns[uid] = ws
		t.Cleanup(func() { ws.Close() })
	}
	closeConn := func(uid string) {
		require.NoError(t, conns[uid].Close())
		delete(conns, uid)
	}
	rp := newReplayer([]string{addr}, key, nil, 1, t.Logf)
	// upToDate reads until the state is want: edges of a close take a
	// tick or two to be made.
	upToDate := func(want ...string) {
		t.Helper()
		var got map[string]bool
		err := waitUntil(ctx, 30*time.Second, func() bool {
			_, err := rp.upToDate(ctx, time.Time{})
			require.NoError(t, err)
			got = rp.st.keys()
			return diffKeys(setOf(want), got) == ""
		})
		require.NoError(t, err, "state %v, want %v", got, want)
	}

	open("a", "ch0", "ch1")
	open("b", "ch0")
	upToDate("a", "a@ch0", "a@ch1", "b", "b@ch0")
	assert.Zero(t, rp.rec.gone, "410s while following")

	// Down: more edges than the log keeps.
	closeConn("a")
	open("c", "ch1", "ch2")
	open("d", "ch2")
	closeConn("b")
	require.NoError(t, waitUntil(ctx, 30*time.Second, func() bool {
		var s struct{ Users []string }
		_, err := rp.get(ctx, "/api/presence?limit=10", &s)
		return err == nil && slices.Equal(s.Users, []string{"c", "d"})
	}))
	upToDate("c", "c@ch1", "c@ch2", "d", "d@ch2")
	assert.Equal(t, 1, rp.rec.gone, "410s after the log dropped the cursor's next edges")
	assert.Equal(t, 1, rp.rec.snapshots, "snapshots")

	// The server restarts: its users reconnect, to a log that never saw the cursor.
	p.Stop(5 * time.Second)
	for uid := range conns {
		delete(conns, uid)
	}
	p = start()
	open("c", "ch1")
	open("e", "ch3")
	upToDate("c", "c@ch1", "e", "e@ch3")
	assert.Equal(t, 2, rp.rec.gone, "410s after the restart")
	assert.Equal(t, 2, rp.rec.snapshots, "snapshots")

	open("f", "ch0")
	closeConn("e")
	upToDate("c", "c@ch1", "f", "f@ch0")
	assert.Equal(t, 2, rp.rec.gone, "410s while following")
	assert.Empty(t, rp.rec.problems, "order rules or ids broken")
	assert.Len(t, rp.rec.segments, 3, "the start of the log, then a segment from each snapshot")
}

func setOf(keys []string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func TestCheckReplay(t *testing.T) {
	stays := []interval{{uid: "u", node: 0, channels: []string{"a"}, from: sec(1), to: sec(60)}}
	hook := edges("w1", "u", "online@1.1")
	hook.events = append(hook.events, event{ID: "w1_1", Type: "join", UID: "u", Channel: "a", At: sec(1.1).UnixMilli()})
	logged := []replayed{{hook.events[0], 0}, {hook.events[1], 0}}
	on := map[string]bool{"u": true, "u@a": true}
	down := catchUp{down: [2]time.Time{sec(10), sec(20)}, end: sec(21)}
	record := func(edit func(r *replayRecord)) *replayRecord {
		r := &replayRecord{events: logged, ids: map[string]int{"w1_0": 0, "w1_1": 0}, segments: []segment{{quiet: sec(59)}},
			catchUps: []catchUp{down}, marks: []mark{{sec(21), on}, {sec(61), on}}}
		r.final = &r.marks[1]
		if edit != nil {
			edit(r)
		}
		return r
	}
	tests := []struct {
		name           string
		posts          []post
		faults         []*fault
		replay         *replayRecord
		want           []string
		judged, inHook int
	}{
		{"clean", []post{hook}, nil, record(nil), nil, 1, 2},
		{"a state wrong after a catch-up", []post{hook}, nil,
			record(func(r *replayRecord) { r.marks[0].on = map[string]bool{"u": true} }), []string{"replay state"}, 1, 2},
		{"a mark within a fault's reach is passed over for the next", []post{hook},
			[]*fault{{kind: nodeKill, node: 1, start: sec(18), end: sec(20), finished: true}},
			record(func(r *replayRecord) {
				r.marks = []mark{{sec(21), map[string]bool{}}, {sec(40), map[string]bool{"u": true}}, {sec(61), on}}
				r.final = &r.marks[2]
			}), []string{"replay state"}, 1, 2},
		{"no mark out of the faults' reach", []post{hook},
			[]*fault{{kind: redisStop, start: sec(18), end: sec(20), finished: true}, {kind: redisStop, start: sec(30), end: sec(58), finished: true}},
			record(func(r *replayRecord) { r.marks[0].on = map[string]bool{} }), nil, 0, 2},
		{"a webhook event the log never gave", []post{hook, edges("w2", "v", "away@30")}, nil, record(nil), []string{"not in the log"}, 1, 3},
		{"a webhook event past the spans read", []post{hook, edges("w2", "v", "away@58")}, nil, record(nil), nil, 1, 2},
		{"a webhook event while the log was not read", []post{hook, edges("w2", "v", "away@30")}, nil,
			record(func(r *replayRecord) {
				r.segments = []segment{{quiet: sec(25)}, {start: sec(35), quiet: sec(59), snapshot: true}}
			}), nil, 1, 2},
		{"the final state wrong", []post{hook}, nil,
			record(func(r *replayRecord) { r.final = &mark{sec(61), map[string]bool{"u": true}} }), []string{"replay final state"}, 1, 2},
		{"never up to date at the end", []post{hook}, nil,
			record(func(r *replayRecord) { r.final = nil }), []string{"replay final state"}, 1, 2},
		{"order rules broken while applying", []post{hook}, nil,
			record(func(r *replayRecord) {
				r.problems = []anomaly{{at: sec(5), key: "u", kind: "replay repeated online"}}
			}), []string{"replay repeated online"}, 1, 2},
		{"no log", []post{hook}, nil, record(func(r *replayRecord) { r.noLog = sec(2) }), []string{"replay: no log"}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &history{start: t0, end: sec(60), ivs: stays, posts: tt.posts, faults: tt.faults, replay: tt.replay}
			h.dedupe()
			h.index()
			h.checkReplay()
			var kinds []string
			for _, a := range h.found {
				kinds = append(kinds, a.kind)
			}
			assert.Equal(t, tt.want, kinds, "%v", h.found)
			assert.Equal(t, tt.judged, h.counted.replay.judged, "catch-ups judged")
			assert.Equal(t, 2*tt.judged, h.counted.replay.keys, "keys judged: the user and its membership")
			assert.Equal(t, tt.inHook, h.counted.replay.inWebhook, "webhook events looked up")
		})
	}
}

func TestDownStretches(t *testing.T) {
	for _, span := range []time.Duration{time.Minute, 2 * time.Minute, 10 * time.Minute} {
		for seed := range uint64(20) {
			downs := downStretches(seed, t0, warmup, span)
			assert.NotEmpty(t, downs, "seed %d, %v: no down stretch", seed, span)
			prev := t0.Add(warmup)
			for _, d := range downs {
				assert.True(t, d[0].After(prev), "seed %d, %v: %v starts before %v", seed, span, d, prev)
				assert.GreaterOrEqual(t, d[1].Sub(d[0]), span/20, "seed %d: down %v", seed, d)
				assert.LessOrEqual(t, d[1].Sub(d[0]), span*3/10, "seed %d: down %v", seed, d)
				assert.False(t, d[1].After(t0.Add(span)), "seed %d: down %v past the span", seed, d)
				prev = d[1]
			}
		}
	}
	var n int
	for seed := range uint64(20) {
		n += len(downStretches(seed, t0, warmup, 10*time.Minute))
	}
	assert.GreaterOrEqual(t, n, 20*3, "down stretches of 20 ten-minute runs: several each")
}
