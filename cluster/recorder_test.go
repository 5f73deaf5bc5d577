package cluster

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// recorder is the Relay of a test node: it keeps everything delivered to it.
type recorder struct {
	mu       sync.Mutex
	edges    []recorded          // UserChanged, for the users the node follows
	produced []recorded          // Produced: the online and offline edges this node made
	made     []presence.Edge     // Produced: every edge this node made, in order
	activity []string            // ActivityChanged when it changes the user's state: "uid away" or "uid active"
	away     map[string]bool     // uid -> away, as relayed
	awayIn   map[string][]string // channel -> its away members now, as relayed
	setAway  map[string][]string // channel -> the away list of its last SetMembers
	online   map[string]bool
	members  map[string][]string        // channel -> its members now, as relayed
	joins    []string                   // "channel uid +" or "channel uid -", in order
	joinedAt map[string][]time.Time     // uid -> when each of its member edges was relayed, any channel
	sets     map[string]int             // channel -> SetMembers calls
	chats    []string                   // the frames delivered
	types    []string                   // their types
	records  map[string]protocol.Record // uid -> its record, as relayed
	recAt    map[string][]time.Time     // uid -> the at of each RecordChanged, in order
	notify   chan struct{}
}

type recorded struct {
	uid string
	on  bool
	at  time.Time
}

func newRecorder() *recorder {
	return &recorder{notify: make(chan struct{}, 1), online: map[string]bool{}, members: map[string][]string{},
		sets: map[string]int{}, away: map[string]bool{}, awayIn: map[string][]string{}, setAway: map[string][]string{},
		records: map[string]protocol.Record{}, recAt: map[string][]time.Time{}, joinedAt: map[string][]time.Time{}}
}

// Receive hands each event to the method that records its kind.
func (r *recorder) Receive(e presence.Event) {
	switch e.Kind {
	case presence.EventUser:
		r.UserChanged(e.UID, e.On, e.At)
	case presence.EventActivity:
		if e.Channel != "" {
			r.MemberActivity(e.Channel, e.UID, e.On)
		} else {
			r.ActivityChanged(e.UID, e.On)
		}
	case presence.EventMember:
		r.MemberChanged(e.Channel, e.UID, e.On)
	case presence.EventRecord:
		r.RecordChanged(e.UID, e.Record, e.At)
	case presence.EventMembers:
		r.SetMembers(e.Channel, e.Members, e.Away)
	case presence.EventProduced:
		r.Produced(e.Edge)
	case presence.EventMessage:
		r.Deliver(e.Message)
	}
}

// UserChanged records an edge when it changes the user's state, as a
// Node's view does: a snapshot of an offline user is no edge.
func (r *recorder) UserChanged(uid string, on bool, at time.Time) {
	r.mu.Lock()
	if r.online[uid] != on {
		r.online[uid] = on
		r.away[uid] = false
		r.edges = append(r.edges, recorded{uid, on, time.Now()})
	}
	r.mu.Unlock()
	r.poke()
}

// Produced records the edges this node made.
func (r *recorder) Produced(e presence.Edge) {
	r.mu.Lock()
	r.made = append(r.made, e)
	if e.Kind == presence.EdgeOnline || e.Kind == presence.EdgeOffline {
		r.produced = append(r.produced, recorded{e.UID, e.Kind == presence.EdgeOnline, time.Now()})
	}
	r.mu.Unlock()
	r.poke()
}

// ActivityChanged records an edge when it changes an online user's
// activity, as a Node's view does.
func (r *recorder) ActivityChanged(uid string, away bool) {
	r.mu.Lock()
	if r.online[uid] && r.away[uid] != away {
		r.away[uid] = away
		r.activity = append(r.activity, uid+" "+activityWord(away))
	}
	r.mu.Unlock()
	r.poke()
}

func activityWord(away bool) string {
	if away {
		return "away"
	}
	return "active"
}

// MemberActivity records an edge when it changes a member's activity, as
// a Node's view does: in the member edges, as "channel uid away|active".
func (r *recorder) MemberActivity(channel, uid string, away bool) {
	r.mu.Lock()
	if slices.Contains(r.members[channel], uid) && slices.Contains(r.awayIn[channel], uid) != away {
		r.setAwayLocked(channel, uid, away)
		r.joins = append(r.joins, channel+" "+uid+" "+activityWord(away))
	}
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) setAwayLocked(channel, uid string, away bool) {
	as := slices.DeleteFunc(r.awayIn[channel], func(m string) bool { return m == uid })
	if away {
		as = append(as, uid)
	}
	slices.Sort(as)
	r.awayIn[channel] = as
}

// MemberChanged records an edge when it changes the channel's members, as
// a Node's view does.
func (r *recorder) MemberChanged(channel, uid string, joined bool) {
	r.mu.Lock()
	if slices.Contains(r.members[channel], uid) == joined {
		r.mu.Unlock()
		return
	}
	ms := slices.DeleteFunc(r.members[channel], func(m string) bool { return m == uid })
	sign := "-"
	if joined {
		ms = append(ms, uid)
		sign = "+"
	}
	slices.Sort(ms)
	r.members[channel] = ms
	if !joined {
		r.setAwayLocked(channel, uid, false) // a leave takes the member's activity with it
	}
	r.joins = append(r.joins, channel+" "+uid+" "+sign)
	r.joinedAt[uid] = append(r.joinedAt[uid], time.Now())
	r.mu.Unlock()
	r.poke()
}

// RecordChanged keeps the user's record.
func (r *recorder) RecordChanged(uid string, rec protocol.Record, at time.Time) {
	r.mu.Lock()
	if rec.IsZero() {
		delete(r.records, uid)
	} else {
		r.records[uid] = rec
	}
	r.recAt[uid] = append(r.recAt[uid], at)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) SetMembers(channel string, members, away []string) {
	r.mu.Lock()
	r.members[channel] = slices.Sorted(slices.Values(members))
	r.awayIn[channel] = slices.Sorted(slices.Values(away))
	r.setAway[channel] = slices.Sorted(slices.Values(away))
	r.sets[channel]++
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) Deliver(m presence.Message) {
	r.mu.Lock()
	r.chats = append(r.chats, string(m.Frame.Data))
	r.types = append(r.types, m.Frame.Type)
	r.mu.Unlock()
	r.poke()
}

// encoded is a frame of type typ whose JSON text is data.
func encoded(typ, data string) protocol.Encoded {
	return protocol.Encoded{Type: typ, Data: []byte(data)}
}

func (r *recorder) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// count returns how many edges of uid in direction on were delivered.
func (r *recorder) count(uid string, on bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return countOf(r.edges, uid, on)
}

// producedCount returns how many edges of uid in direction on this node made.
func (r *recorder) producedCount(uid string, on bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return countOf(r.produced, uid, on)
}

func countOf(edges []recorded, uid string, on bool) int {
	n := 0
	for _, e := range edges {
		if e.uid == uid && e.on == on {
			n++
		}
	}
	return n
}

func (r *recorder) edgeTime(uid string, on bool) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.edges {
		if e.uid == uid && e.on == on {
			return e.at
		}
	}
	return time.Time{}
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.edges...)
}

// setsOf returns how many times channel's members were set: a snapshot, or
// the drop of a topic nobody follows any more.
func (r *recorder) setsOf(channel string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sets[channel]
}

func (r *recorder) membersOf(channel string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.members[channel])
}

// joinEdges returns the member edges relayed for uid in channel, in order.
func (r *recorder) joinEdges(channel, uid string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, j := range r.joins {
		if strings.HasPrefix(j, channel+" "+uid+" ") {
			out = append(out, j[len(channel)+len(uid)+2:])
		}
	}
	return out
}

// waitFor waits, on deliveries rather than a fixed sleep, until cond holds.
func (r *recorder) waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond) // conditions that depend on Redis, not deliveries
	defer tick.Stop()
	for !cond() {
		select {
		case <-r.notify:
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
	}
}

// eventually waits until every assertion of check holds at once. Use it for
// what a test asserts, not for a different signal it expects to come first:
// an edge reaches a node over Pub/Sub before the node that made it has
// handled its script's reply, and one node's write may land before another's.
func eventually(t *testing.T, what string, check func(c *assert.CollectT)) {
	t.Helper()
	require.EventuallyWithT(t, check, testWait, 10*time.Millisecond, what)
}

// activityOf returns the activity edges relayed for uid, in order.
func (r *recorder) activityOf(uid string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.activity {
		if w, ok := strings.CutPrefix(a, uid+" "); ok {
			out = append(out, w)
		}
	}
	return out
}

// madeEdges returns the edges this node made, in order, as "kind uid" or
// "kind uid channel".
func (r *recorder) madeEdges() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.made {
		s := e.Kind.String() + " " + e.UID
		if e.Channel != "" {
			s += " " + e.Channel
		}
		out = append(out, s)
	}
	return out
}

// madeAt returns when the last edge of kind for uid that this node made
// happened, and whether there is one.
func (r *recorder) madeAt(kind presence.EdgeKind, uid string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.made) - 1; i >= 0; i-- {
		if e := r.made[i]; e.Kind == kind && e.UID == uid {
			return e.At, true
		}
	}
	return time.Time{}, false
}

// awayOf returns channel's away members as relayed, and the away list of
// its last snapshot.
func (r *recorder) awayOf(channel string) (now, snapshot []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.awayIn[channel]), slices.Clone(r.setAway[channel])
}

// longestGap returns the longest time between from and to in which no
// member edge of any of uids was relayed.
func (r *recorder) longestGap(uids []string, from, to time.Time) time.Duration {
	r.mu.Lock()
	times := []time.Time{from, to}
	for _, uid := range uids {
		for _, at := range r.joinedAt[uid] {
			if at.After(from) && at.Before(to) {
				times = append(times, at)
			}
		}
	}
	r.mu.Unlock()
	slices.SortFunc(times, time.Time.Compare)
	var gap time.Duration
	for i := 1; i < len(times); i++ {
		gap = max(gap, times[i].Sub(times[i-1]))
	}
	return gap
}
