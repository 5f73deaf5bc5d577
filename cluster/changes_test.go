package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func u(uid string, n, away int) record { return record{uid: uid, n: n, away: away} }
func m(ch, uid string, on, away int) record {
	return record{channel: ch, uid: uid, n: on, away: away}
}

// roundsOf renders rounds as sorted strings, a round a line.
func roundsOf(rounds [][]record) []string {
	var out []string
	for _, rs := range rounds {
		var line []string
		for _, r := range rs {
			line = append(line, fmt.Sprintf("%s/%s=%d.%d", r.channel, r.uid, r.n, r.away))
		}
		slices.Sort(line)
		out = append(out, fmt.Sprint(line))
	}
	return out
}

func TestChangesKeepFlipsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		adds []record
		want []string
	}{
		{"coalesced while nothing flips", []record{u("a", 1, 0), u("a", 2, 0), u("a", 3, 1)},
			[]string{"[/a=3.1]"}},
		{"a connect and close are two rounds", []record{u("a", 1, 0), u("a", 0, 0)},
			[]string{"[/a=1.0]", "[/a=0.0]"}},
		{"away and back are two rounds", []record{u("a", 1, 0), u("a", 1, 1), u("a", 1, 0)},
			[]string{"[/a=1.0]", "[/a=1.1]", "[/a=1.0]"}},
		{"one away of two flips nothing", []record{u("a", 2, 0), u("a", 2, 1)},
			[]string{"[/a=2.1]"}},
		{"a leave made before the offline is not written after it", []record{
			u("a", 1, 0), m("lobby", "a", 1, 0), m("lobby", "a", 0, 0), u("a", 0, 0)},
			[]string{"[/a=1.0 lobby/a=1.0]", "[/a=0.0 lobby/a=0.0]"}},
		{"a key first seen after a flip goes after it", []record{
			m("lobby", "a", 1, 0), m("lobby", "a", 0, 0), u("a", 0, 0)},
			[]string{"[lobby/a=1.0]", "[/a=0.0 lobby/a=0.0]"}},
		{"unrelated keys share rounds", []record{u("a", 1, 0), u("b", 1, 0), u("a", 0, 0), u("b", 2, 0)},
			[]string{"[/a=1.0 /b=2.0]", "[/a=0.0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c changes
			for _, r := range tc.adds {
				c.add(r)
			}
			n := c.n
			segs := c.take(0)
			require.Len(t, segs, 1, "no cut, one segment")
			rounds := segs[0].rounds
			assert.Equal(t, tc.want, roundsOf(rounds))
			total := 0
			for _, rs := range rounds {
				total += len(rs)
			}
			assert.Equal(t, total, n, "counted")
			assert.Zero(t, c.n, "take empties")
		})
	}
}

// Rounds that failed go back before what changed since.
func TestChangesPutBackBeforeNewer(t *testing.T) {
	var c changes
	c.add(u("a", 1, 0))
	taken := c.take(1)
	c.add(u("a", 0, 0))
	c.putBack(taken)
	assert.Equal(t, []string{"[/a=1.0]", "|", "[/a=0.0]"}, segmentsOf(c.take(2)),
		"cut where the taken rounds ended: a record change made before the newer flip waits for them alone")

	c.add(u("b", 1, 0))
	taken = c.take(3)
	c.add(u("b", 2, 0)) // the same in Redis's eyes: the newer count wins
	c.putBack(taken)
	assert.Equal(t, []string{"[/b=2.0]", "|"}, segmentsOf(c.take(4)))
}

// Put back, a round stays whole, so that waves still orders one user's
// records of both kinds: a newer flip of another key must not split the
// user's online from its joins, nor its leaves from its offline. A round
// is a map, read in a random order: many runs.
func TestChangesPutBackKeepsARoundWhole(t *testing.T) {
	for range 50 {
		var c changes
		c.add(u("b", 1, 0))
		c.add(u("z", 1, 0))
		c.add(m("lobby", "z", 1, 0))
		taken := c.take(1)
		c.add(u("a", 1, 0))
		c.add(m("lobby", "a", 1, 0))
		c.add(u("b", 0, 0))
		c.add(m("lobby", "z", 0, 0))
		c.add(u("z", 0, 0))
		c.putBack(taken)
		require.Equal(t, []string{"[/b=1.0 /z=1.0 lobby/z=1.0]", "|", "[/a=1.0 /b=0.0 /z=0.0 lobby/a=1.0 lobby/z=0.0]"},
			segmentsOf(c.take(2)))
	}
}

// A round added at once (put back, or requeued) goes in one round but for
// the records that flip nothing, whatever its order.
func TestChangesAddRound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		held, adds []record
		want       []string
	}{
		{"an online and its joins stay together past a newer flip", []record{u("b", 1, 0)},
			[]record{m("lobby", "a", 1, 0), u("b", 0, 0), u("a", 1, 0)},
			[]string{"[/b=1.0]", "[/a=1.0 /b=0.0 lobby/a=1.0]"}},
		{"leaves and their offline stay together past a newer flip", []record{u("b", 1, 0)},
			[]record{u("a", 0, 0), u("b", 0, 0), m("lobby", "a", 0, 0)},
			[]string{"[/b=1.0]", "[/a=0.0 /b=0.0 lobby/a=0.0]"}},
		{"a record that flips nothing stays where its key is", []record{u("a", 1, 0), u("b", 1, 0)},
			[]record{u("a", 2, 0), u("b", 0, 0)},
			[]string{"[/a=2.0 /b=1.0]", "[/b=0.0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c changes
			for _, r := range tc.held {
				c.add(r)
			}
			c.addRound(tc.adds)
			assert.Equal(t, tc.want, roundsOf(c.take(1)[0].rounds))
		})
	}
}

// A record change cuts the rounds: what flips after it goes in a later
// segment, whatever round its key had; what flips nothing stays where its
// key is. Put back, the cuts stay where they were.
func TestChangesCutAtARecordChange(t *testing.T) {
	var c changes
	c.add(u("a", 1, 0))
	c.cut(1) // a turns invisible
	c.add(m("lobby", "a", 1, 0))
	c.add(u("b", 1, 0))
	c.add(u("a", 2, 0)) // flips nothing: stays before the cut
	segs := c.take(4)
	require.Len(t, segs, 2)
	assert.Equal(t, int64(1), segs[0].counted)
	assert.Equal(t, int64(4), segs[1].counted)
	assert.Equal(t, []string{"[/a=2.0]", "|", "[/b=1.0 lobby/a=1.0]"}, segmentsOf(segs))

	c.add(u("c", 1, 0))
	c.cut(5)
	c.putBack(segs)
	assert.Equal(t, []string{"[/a=2.0]", "|", "[/b=1.0 lobby/a=1.0]", "|", "[/c=1.0]", "|"}, segmentsOf(c.take(6)),
		"c, made after every segment taken, goes after them, and before its own cut")
	assert.Empty(t, c.cuts)
}

// segmentsOf writes segments as roundsOf does, "|" between segments.
func segmentsOf(segs []segment) []string {
	var out []string
	for i, seg := range segs {
		if i > 0 {
			out = append(out, "|")
		}
		out = append(out, roundsOf(seg.rounds)...)
	}
	return out
}

// A round's waves: where one user has records of both kinds in it, the
// record that can make its online goes before its memberships, and its
// memberships before the record that can make its offline; the others all
// go in the first wave.
func TestWaves(t *testing.T) {
	cases := []struct {
		name          string
		round         []record
		first, second string
	}{
		{"no user of both kinds", []record{u("a", 1, 0), m("c", "b", 1, 0), m("c", "a2", 0, 0)}, "u a 1 0, m c a2 0 0, m c b 1 0", ""},
		{"online, then joins", []record{m("c", "a", 1, 0), u("a", 1, 0), m("d", "a", 1, 0)}, "u a 1 0", "m c a 1 0, m d a 1 0"},
		{"leaves, then offline", []record{u("a", 0, 0), m("c", "a", 0, 0), m("d", "a", 0, 0)}, "m c a 0 0, m d a 0 0", "u a 0 0"},
		{"a second tab counts as online", []record{u("a", 2, 1), m("c", "a", 1, 1)}, "u a 2 1", "m c a 1 1"},
		{"two users, each its own way", []record{u("a", 0, 0), m("c", "a", 0, 0), u("b", 1, 0), m("c", "b", 1, 0), u("x", 1, 0)},
			"u b 1 0, u x 1 0, m c a 0 0", "u a 0 0, m c b 1 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first, second := waves(tc.round)
			assert.Equal(t, tc.first, waveText(first), "first wave")
			assert.Equal(t, tc.second, waveText(second), "second wave")
			assert.Len(t, append(first, second...), len(tc.round), "every record once")
		})
	}
}

// waveText renders records, user records first, each kind sorted.
func waveText(rs []record) string {
	var users, members []string
	for _, r := range rs {
		if r.channel == "" {
			users = append(users, fmt.Sprintf("u %s %d %d", r.uid, r.n, r.away))
		} else {
			members = append(members, fmt.Sprintf("m %s %s %d %d", r.channel, r.uid, r.n, r.away))
		}
	}
	slices.Sort(users)
	slices.Sort(members)
	return strings.Join(append(users, members...), ", ")
}
