package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// A streamEntry is one entry of a shard's log, for merging.
type streamEntry struct {
	id    logID
	shard int
	kind  string
	uid   string
	chann string
}

// mergedLog reads every shard's log and merges the entries as a reader
// does: by (ms, n, shard).
func mergedLog(t *testing.T, c redis.UniversalClient, keys []shardKeys) []streamEntry {
	t.Helper()
	var all []streamEntry
	for s, msgs := range logEntries(t, c, keys) {
		for _, m := range msgs {
			id, ok := parseLogID(m.ID)
			require.True(t, ok, m.ID)
			str := func(f string) string { v, _ := m.Values[f].(string); return v }
			all = append(all, streamEntry{id, s, str("k"), str("u"), str("c")})
		}
	}
	slices.SortFunc(all, func(a, b streamEntry) int {
		switch {
		case a.id.after(b.id):
			return 1
		case b.id.after(a.id):
			return -1
		}
		return a.shard - b.shard
	})
	return all
}

// checkLogOrder replays the merged log per user and reports what breaks
// the order the log promises: a join, away or active while the user is
// offline; an offline while it is a member of a channel; an online or a
// join twice, an offline or a leave without one.
func checkLogOrder(log []streamEntry) []string {
	online := map[string]bool{}
	member := map[string]map[string]bool{}
	var bad []string
	for i, e := range log {
		m := member[e.uid]
		if m == nil {
			m = map[string]bool{}
			member[e.uid] = m
		}
		at := fmt.Sprintf("#%d %s-%d shard %d: %s %s %s", i, strconv.FormatUint(e.id.ms, 10), e.id.n, e.shard, e.kind, e.uid, e.chann)
		switch e.kind {
		case "online":
			if online[e.uid] {
				bad = append(bad, at+": online twice")
			}
			online[e.uid] = true
		case "offline":
			if !online[e.uid] {
				bad = append(bad, at+": offline while offline")
			}
			for ch, in := range m {
				if in {
					bad = append(bad, at+": offline while a member of "+ch)
				}
			}
			online[e.uid] = false
		case "away", "active":
			if !online[e.uid] {
				bad = append(bad, at+": activity while offline")
			}
		case "join":
			if !online[e.uid] {
				bad = append(bad, at+": join while offline")
			}
			if m[e.chann] {
				bad = append(bad, at+": join twice")
			}
			m[e.chann] = true
		case "leave":
			if !m[e.chann] {
				bad = append(bad, at+": leave while not a member")
			}
			m[e.chann] = false
		}
	}
	return bad
}

// Several nodes change shared users at random (connections, activity,
// memberships, records), one of them dies and is claimed, the others
// leave; the merged log keeps, for every user, its online before its
// activity and joins, and its leaves before its offline, on a single Redis
// and on a Redis Cluster. PRESENCED_ORDER_SEED replays a seed.
func TestLogOrderAcrossShards(t *testing.T) {
	cases := []struct {
		name   string
		client func(t *testing.T) func() redis.UniversalClient
	}{
		{"redis", func(t *testing.T) func() redis.UniversalClient {
			srv := startRedis(t)
			return func() redis.UniversalClient { return srv.client(t) }
		}},
		{"redis cluster", func(t *testing.T) func() redis.UniversalClient {
			rc := startRedisCluster(t)
			return func() redis.UniversalClient { return rc.client(t) }
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			if s := os.Getenv("PRESENCED_ORDER_SEED"); s != "" {
				var err error
				seed, err = strconv.ParseUint(s, 10, 64)
				require.NoError(t, err)
			}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d (PRESENCED_ORDER_SEED=%d replays it)", seed, seed)
				}
			})
			newClient := tc.client(t)
			driveAndCheckOrder(t, newClient, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
		})
	}
}

// orderNode is a node of the test and what it holds, as a presence.Node
// would have told it: a membership only while it holds the user.
type orderNode struct {
	*node
	conns   map[string]int
	members map[string]map[string]bool // uid -> channel -> held
}

func driveAndCheckOrder(t *testing.T, newClient func() redis.UniversalClient, rng *rand.Rand) {
	const users, channels, steps = 10, 4, 600
	start := func(name string) *orderNode {
		cfg := testConfig(newClient(), name)
		cfg.Shards = 8
		return &orderNode{node: startNode(t, cfg), conns: map[string]int{}, members: map[string]map[string]bool{}}
	}
	nodes := []*orderNode{start("a"), start("b"), start("c")}
	keys := nodes[0].keys
	admin := newClient()
	uid := func() string { return "u" + strconv.Itoa(rng.IntN(users)) }
	drop := func(n *orderNode, u string) {
		for ch := range n.members[u] {
			n.SetMember(ch, u, 0, false)
		}
		delete(n.members, u)
		delete(n.conns, u)
		n.SetUser(u, 0, 0)
	}
	settled := func() {
		for _, n := range nodes {
			n.rec.waitFor(t, testWait, "the writes land", func() bool { return testutil.ToFloat64(n.m.pending) == 0 })
		}
	}
	var dead *orderNode
	for step := range steps {
		if step == steps/2 {
			// One node dies mid-run; another takes its place.
			dead = nodes[2]
			dead.crash()
			dead.stopRun()
			nodes[2] = start("d")
		}
		n := nodes[rng.IntN(len(nodes))]
		u := uid()
		switch op := rng.IntN(10); {
		case op < 4: // connections and activity
			if c := rng.IntN(3); c == 0 {
				drop(n, u)
			} else {
				n.conns[u] = c
				n.SetUser(u, c, rng.IntN(c+1))
			}
		case op < 8: // a membership, of a user the node holds
			if n.conns[u] == 0 {
				break
			}
			ch := "ch" + strconv.Itoa(rng.IntN(channels))
			if n.members[u] == nil {
				n.members[u] = map[string]bool{}
			}
			if n.members[u][ch] {
				delete(n.members[u], ch)
				n.SetMember(ch, u, 0, false)
			} else {
				n.members[u][ch] = true
				n.SetMember(ch, u, 1, rng.IntN(3) == 0)
			}
		case op < 9: // a record
			if n.conns[u] > 0 {
				n.SetRecord(u, protocol.Set{Mode: []string{protocol.ModeDND, "online"}[rng.IntN(2)]})
			}
		default: // every held user leaves at once
			for held := range n.conns {
				drop(n, held)
			}
		}
		if rng.IntN(4) == 0 {
			settled() // else the next changes join this round
		}
	}
	// The dead node's records go with a claim; then the others leave.
	eventually(t, "the dead node reaped", func(c *assert.CollectT) {
		for _, k := range keys {
			recs, err := admin.ZRangeByLex(context.Background(), k.tag+":ui", &redis.ZRangeBy{
				Min: "[" + dead.cfg.Node + " ", Max: "(" + dead.cfg.Node + "!"}).Result()
			assert.NoError(c, err)
			assert.Empty(c, recs)
		}
	})
	for _, n := range nodes {
		require.NoError(t, n.Withdraw(context.Background()))
	}
	for _, k := range keys {
		for _, key := range []string{k.online, k.members} {
			n, err := admin.ZCard(context.Background(), key).Result()
			require.NoError(t, err)
			require.Zero(t, n, "%s: everyone left", key)
		}
	}
	log := mergedLog(t, admin, keys)
	t.Logf("%d entries in the merged log", len(log))
	require.NotEmpty(t, log)
	bad := checkLogOrder(log)
	assert.Empty(t, bad, "the merged log breaks the order:\n%s", strings.Join(bad, "\n"))
}
