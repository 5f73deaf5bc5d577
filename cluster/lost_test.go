package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// Redis SIGKILLed under churn and restarted empty: nobody who stayed gets an
// edge again, and every change made while Redis was away makes its edge once.
func TestRedisRestartedEmptyUnderChurn(t *testing.T) {
	srv := startRedis(t)
	testLossUnderChurn(t, srv, func() time.Time {
		srv.kill()
		time.Sleep(2 * testTimeout) // an outage longer than a lease
		srv.restart()
		return time.Now()
	})
}

// FLUSHALL under churn: no connection drops, Redis just holds nothing.
func TestRedisFlushedUnderChurn(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t)
	testLossUnderChurn(t, srv, func() time.Time {
		require.NoError(t, c.FlushAll(context.Background()).Err())
		return time.Now()
	})
}

// churner flips the users of one node on and off, and remembers what it
// holds last.
type churner struct {
	n    *node
	uids []string
	mu   sync.Mutex
	on   map[string]bool
}

func (c *churner) run(stop <-chan struct{}, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(2+rng.IntN(8)) * time.Millisecond):
		}
		uid := c.uids[rng.IntN(len(c.uids))]
		c.mu.Lock()
		on := !c.on[uid]
		c.on[uid] = on
		c.mu.Unlock()
		if on {
			c.n.SetUser(uid, 1, 0)
			c.n.SetMember("room", uid, 1, false)
		} else {
			c.n.SetMember("room", uid, 0, false)
			c.n.SetUser(uid, 0, 0)
		}
	}
}

func testLossUnderChurn(t *testing.T, srv *redisServer, lose func() time.Time) {
	testChurn(t, churnSetup{client: func() redis.UniversalClient { return srv.client(t) }}, lose)
}

// churnSetup is how testChurn runs: the Redis client of each node, how
// many users stay and churn (0: the defaults), a Relay of the test's own
// around each node's recorder (nil: none).
type churnSetup struct {
	client          func() redis.UniversalClient
	stable, churned int
	wrap            func(*Engine, *recorder) presence.Relay
}

// churnResult is what testChurn found: the edges both nodes made, in the
// order made, and its figures.
type churnResult struct {
	made                   []presence.Edge
	dups, missing, unequal int
	exact                  time.Duration // from the time lose returned to exact member sets on both nodes
	// gap is the longest time, from when lose was called to when the churn
	// stopped, in which b relayed no member edge of a user only a holds.
	gap time.Duration
}

// testChurn makes two nodes hold stable users and churn others while lose
// makes Redis lose data (or fail over), then checks that the member sets
// come out exact and that each edge was made once. lose returns the time
// exact member sets are counted from.
func testChurn(t *testing.T, setup churnSetup, lose func() time.Time) churnResult {
	stableN, churnN := 200, 120
	if raceEnabled {
		stableN, churnN = 100, 60
	}
	if setup.stable > 0 {
		stableN, churnN = setup.stable, setup.churned
	}
	a := startNodeRelay(t, testConfig(setup.client(), "a"), setup.wrap)
	b := startNodeRelay(t, testConfig(setup.client(), "b"), setup.wrap)
	nodes := []*node{a, b}
	stable, churned := uidsOf("s", stableN), uidsOf("c", churnN)
	follow := append(append([]string{"#room"}, stable...), churned...)
	for _, n := range nodes {
		n.follow(t, follow...)
	}
	// Stable users: one node each, every fourth on both, every fifth away.
	for i, uid := range stable {
		holders := []*node{nodes[i%2]}
		if i%4 == 0 {
			holders = nodes
		}
		for _, n := range holders {
			away := 0
			if i%5 == 0 {
				away = 1
			}
			n.SetUser(uid, 1, away)
			n.SetMember("room", uid, 1, away == 1)
		}
	}
	want := slices.Clone(stable)
	slices.Sort(want)
	for _, n := range nodes {
		n.rec.waitFor(t, testWait, "stable members on "+n.Node(), func() bool {
			return slices.Equal(n.rec.membersOf("room"), want)
		})
	}
	// Churned users: the first two thirds on one node each, the rest on
	// both, each node flipping its own.
	third := churnN / 3
	chs := []*churner{{n: a, on: map[string]bool{}}, {n: b, on: map[string]bool{}}}
	for i, uid := range churned {
		switch {
		case i >= 2*third:
			chs[0].uids = append(chs[0].uids, uid)
			chs[1].uids = append(chs[1].uids, uid)
		default:
			chs[i%2].uids = append(chs[i%2].uids, uid)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range chs {
		wg.Go(func() { c.run(stop, uint64(i+1)) })
	}
	time.Sleep(testTimeout)
	began := time.Now()
	back := lose()
	time.Sleep(testTimeout) // churn on while nodes restore
	close(stop)
	wg.Wait()
	stopped := time.Now()
	var onlyA []string
	for i, uid := range churned[:2*third] {
		if i%2 == 0 {
			onlyA = append(onlyA, uid)
		}
	}
	gap := b.rec.longestGap(onlyA, began, stopped)

	online := map[string]bool{}
	for _, uid := range stable {
		online[uid] = true
	}
	for _, c := range chs {
		for uid, on := range c.on {
			online[uid] = online[uid] || on
		}
	}
	var wantOnline []string
	for uid, on := range online {
		if on {
			wantOnline = append(wantOnline, uid)
		}
	}
	slices.Sort(wantOnline)
	ctx := context.Background()
	for _, n := range nodes {
		defer func() {
			if t.Failed() {
				_, members, _ := n.Members(ctx, "room", "", 1000)
				slices.Sort(members)
				for _, uid := range minus(n.rec.membersOf("room"), wantOnline) {
					t.Logf("%s: %s shown a member; held there: %v", n.Node(), uid, n.w.holds("room", uid))
				}
				t.Logf("%s: view %d, redis %d, want %d: view-want %v, want-view %v, redis-want %v, want-redis %v", n.Node(),
					len(n.rec.membersOf("room")), len(members), len(wantOnline),
					minus(n.rec.membersOf("room"), wantOnline), minus(wantOnline, n.rec.membersOf("room")),
					minus(members, wantOnline), minus(wantOnline, members))
			}
		}()
		// Generous: after a Sentinel switchover, a node hears its old
		// subscriptions until Sentinel demotes the old master, which it
		// finds on its next INFO, up to 10 s later.
		n.rec.waitFor(t, 2*testTimeout+2*testWait, "exact members on "+n.Node(), func() bool {
			if !slices.Equal(n.rec.membersOf("room"), wantOnline) {
				return false
			}
			_, members, err := n.Members(ctx, "room", "", 1000)
			slices.Sort(members)
			return err == nil && slices.Equal(members, wantOnline)
		})
	}
	exact, settled := time.Since(back), time.Since(stopped)
	time.Sleep(testRenew + testTimeout) // anything late would be in by now

	// The union of the edges both nodes produced, in the order made.
	var made []presence.Edge
	for _, n := range nodes {
		n.rec.mu.Lock()
		made = append(made, n.rec.made...)
		n.rec.mu.Unlock()
	}
	slices.SortStableFunc(made, func(x, y presence.Edge) int { return x.At.Compare(y.At) })
	byUser := map[string][]presence.Edge{}
	for _, e := range made {
		byUser[e.UID] = append(byUser[e.UID], e)
	}
	dups, missing := 0, 0
	for i, uid := range stable {
		wantEdges := []string{"online", "join"}
		if i%5 == 0 {
			wantEdges = []string{"online", "away", "join"}
		}
		var got []string
		for _, e := range byUser[uid] {
			got = append(got, e.Kind.String())
		}
		if !assert.ElementsMatch(t, wantEdges, got, "edges of stable %s", uid) {
			dups += max(0, len(got)-len(wantEdges))
			missing += len(minus(wantEdges, got))
		}
	}
	unequal, flips := 0, 0
	for _, uid := range churned {
		var user, member []presence.Edge
		for _, e := range byUser[uid] {
			switch e.Kind {
			case presence.EdgeOnline, presence.EdgeOffline:
				user = append(user, e)
			case presence.EdgeJoin, presence.EdgeLeave:
				member = append(member, e)
			}
		}
		on, ok := alternate(user, presence.EdgeOnline)
		in, inOK := alternate(member, presence.EdgeJoin)
		flips += len(user)
		if !assert.True(t, ok, "%s: online and offline alternate: %v", uid, user) || !assert.Equal(t, online[uid], on, "%s ends online by its edges", uid) {
			unequal++
		}
		assert.True(t, inOK, "%s: join and leave alternate: %v", uid, member)
		assert.Equal(t, online[uid], in, "%s ends a member by its edges", uid)
	}
	// The views of both nodes: no stable user was ever shown offline.
	falseOff := 0
	for _, n := range nodes {
		for _, uid := range stable {
			falseOff += n.rec.count(uid, false)

		}
	}
	assert.Zero(t, falseOff, "stable users relayed offline")
	st, err := a.Status(ctx, stable[0])
	require.NoError(t, err)
	assert.True(t, st.Away, "away survives")
	t.Logf("%d stable, %d churned users (%d online at the end): %d edges of churned users, %d repeated and %d missing edges of stable users, %d churned users with unequal online/offline; member sets exact on both nodes %v after Redis was back (%v after the churn stopped)",
		stableN, churnN, len(wantOnline)-stableN, flips, dups, missing, unequal, exact.Round(time.Millisecond), settled.Round(time.Millisecond))
	return churnResult{made: made, dups: dups, missing: missing, unequal: unequal, exact: exact, gap: gap}
}

// uidsOf returns n user IDs: prefix0, prefix1, ...
func uidsOf(prefix string, n int) []string {
	uids := make([]string, n)
	for i := range uids {
		uids[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return uids
}

func minus(x, y []string) []string {
	var out []string
	for _, s := range x {
		if !slices.Contains(y, s) {
			out = append(out, s)
		}
	}
	return out
}

// alternate reports whether edges, sorted by time, alternate between up
// and its opposite starting with up, and the state they end in. Two nodes'
// edges made in the same millisecond may be in either order.
func alternate(edges []presence.Edge, up presence.EdgeKind) (bool, bool) {
	on := false
	for i := 0; i < len(edges); {
		j := i
		for j < len(edges) && edges[j].At.Equal(edges[i].At) {
			j++
		}
		ups := 0
		for _, e := range edges[i:j] {
			if e.Kind == up {
				ups++
			}
		}
		downs := j - i - ups
		// A tie alternates from on if its ups and downs differ by at most
		// one, the surplus being the one on does not hold.
		switch {
		case ups == downs:
		case !on && ups == downs+1:
			on = true
		case on && downs == ups+1:
			on = false
		default:
			return on, false
		}
		i = j
	}
	return on, true
}
