package cluster

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/presence"
)

// userIDs returns n user IDs: prefix0, prefix1, ...
func userIDs(prefix string, n int) []string {
	uids := make([]string, n)
	for i := range uids {
		uids[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return uids
}

// waitNoLiveness waits until no liveness entry in the first shards of
// prefix's keys has time left by Redis's clock: a crashed node's, with no
// node renewing.
func waitNoLiveness(t *testing.T, c redis.UniversalClient, prefix string, shards int) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		now, err := c.Time(ctx).Result()
		if err != nil {
			return false
		}
		for s := range shards {
			live, err := c.ZCount(ctx, newShardKeys(prefix, s).alive, fmt.Sprint(now.UnixMilli()), "+inf").Result()
			if err != nil || live > 0 {
				return false
			}
		}
		return true
	}, processWait, 20*time.Millisecond, "a liveness entry never ran out")
}

// claimSome runs one claim by a node of no engine in each of the first
// shards, reaping at most limit records per shard, and returns the edges
// it made as "kind uid" or "kind uid channel".
func claimSome(t *testing.T, c redis.UniversalClient, shards, limit int) []string {
	t.Helper()
	var out []string
	for s := range shards {
		k := newShardKeys("t", s)
		run := func() []any {
			res, err := scriptResult(claimScript.Run(context.Background(), c, k.keys, k.tag, "claimer",
				int64(60000), limit, time.Hour.Milliseconds(), int64(0), time.Hour.Milliseconds()), 3)
			require.NoError(t, err)
			return res
		}
		res := run()
		if flag(res[1]) {
			// The shard's first claim ever pauses claims (for no time here).
			res = run()
		}
		require.False(t, flag(res[1]), "the claim paused")
		for i := claimHead; i+4 < len(res); i += 5 {
			e := res[i].(string) + " " + res[i+1].(string)
			if ch := res[i+2].(string); ch != "" {
				e += " " + ch
			}
			out = append(out, e)
		}
	}
	return out
}

// A process killed and started again under the same name is a new node to
// Redis: its predecessor's users go offline, and leave their channels,
// once each, when the predecessor's liveness runs out, whether the new one
// starts at once, after that, or while another node's claim of the
// predecessor's records is under way. A user the new one holds by then
// stays online.
func TestSameNameRestartReapsThePredecessor(t *testing.T) {
	for _, tc := range []struct {
		name          string
		expire, claim bool // start the new one after the lease ran out; after a partial claim of it
		kept          bool // the new one takes u0 over at once
	}{
		{name: "at once", kept: true},
		{name: "after the lease ran out", expire: true},
		{name: "during a claim", expire: true, claim: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t)
			c := srv.client(t)
			const users = 60
			uids := userIDs("u", users)
			old := startNode(t, testConfig(srv.client(t), "a"))
			for _, uid := range uids {
				old.SetUser(uid, 1, 0)
				old.SetMember("lobby", uid, 1, false)
			}
			eventually(t, "every user online and in the lobby", func(c *assert.CollectT) {
				n, _, err := old.Users(context.Background(), 0)
				assert.NoError(c, err)
				assert.Equal(c, users, n)
				n, _, err = old.Members(context.Background(), "lobby", "", 0)
				assert.NoError(c, err)
				assert.Equal(c, users, n)
			})
			old.crash()
			old.stopRun()
			killed := time.Now()

			var claimed []string // the edges of a claim by another node, under way when the new one starts
			if tc.expire {
				waitNoLiveness(t, c, "t", 4)
			}
			if tc.claim {
				claimed = claimSome(t, c, 4, 3)
				require.NotEmpty(t, claimed)
				left := 0
				for s := range 4 {
					n, err := c.SCard(context.Background(), newShardKeys("t", s).tag+":dead").Result()
					require.NoError(t, err)
					left += int(n)
				}
				require.Positive(t, left, "the claim reaped everything: nothing left under way")
			}
			restarted := time.Now()
			fresh := startNode(t, testConfig(srv.client(t), "a"))
			assert.Equal(t, "a", fresh.Node(), "the name stays the configured one")
			assert.True(t, strings.HasPrefix(fresh.cfg.Node, "a#"), "the node in Redis: %s", fresh.cfg.Node)
			assert.NotEqual(t, old.cfg.Node, fresh.cfg.Node, "the node in Redis is the process's own")
			if tc.kept {
				fresh.SetUser("u0", 1, 0)
				fresh.SetMember("lobby", "u0", 1, false)
			}
			gone := uids
			if tc.kept {
				gone = uids[1:]
			}
			count := func(edge string) int {
				n := 0
				for _, e := range append(fresh.rec.madeEdges(), claimed...) {
					if e == edge {
						n++
					}
				}
				return n
			}
			fresh.rec.waitFor(t, testWait, "every old user offline and out of the lobby", func() bool {
				for _, uid := range gone {
					if count("offline "+uid) == 0 || count("leave "+uid+" lobby") == 0 {
						return false
					}
				}
				return true
			})
			var last time.Time
			for _, uid := range gone {
				if at, ok := fresh.rec.madeAt(presence.EdgeOffline, uid); ok && at.After(last) {
					last = at
				}
			}
			t.Logf("%d users: kill to last offline %v, restart to last offline %v (timeout %v, renew every %v, claim every %v)",
				len(gone), last.Sub(killed).Round(time.Millisecond), last.Sub(restarted).Round(time.Millisecond),
				testTimeout, testRenew, testClaim)
			time.Sleep(3 * testClaim) // room for a repeat to show
			for _, uid := range gone {
				assert.Equal(t, 1, count("offline "+uid), "offline edges of %s", uid)
				assert.Equal(t, 1, count("leave "+uid+" lobby"), "leave edges of %s", uid)
			}
			if tc.kept {
				// The new one's write of u0 lands before the predecessor's
				// lease runs out unless the machine stalls it that long:
				// then u0 goes offline and comes back, once each.
				switch made := strings.Join(filterEdges(fresh.rec.madeEdges(), "u0"), ","); made {
				case "":
					t.Log("u0 stayed online and in the lobby through the restart")
				default:
					assert.Equal(t, "leave u0 lobby,offline u0,online u0,join u0 lobby", made)
				}
			}
			n, online, err := fresh.Users(context.Background(), 10)
			require.NoError(t, err)
			m, members, err := fresh.Members(context.Background(), "lobby", "", 10)
			require.NoError(t, err)
			if tc.kept {
				assert.Equal(t, 1, n)
				assert.Equal(t, []string{"u0"}, online)
				assert.Equal(t, 1, m)
				assert.Equal(t, []string{"u0"}, members)
			} else {
				assert.Zero(t, n, "online: %v", online)
				assert.Zero(t, m, "members: %v", members)
			}
		})
	}
}

// filterEdges keeps the edges ("kind uid ...") of uid.
func filterEdges(edges []string, uid string) []string {
	var out []string
	for _, e := range edges {
		if f := strings.Fields(e); len(f) > 1 && f[1] == uid {
			out = append(out, e)
		}
	}
	return out
}

// A real presenced holding 300 users in the lobby is SIGKILLed and started
// again under the same -node, as a supervisor does, and none of its clients
// comes back: each of those users goes offline and leaves the lobby once,
// cluster-wide, within two timeouts, whether the restart comes at once
// (another node is there to claim too) or after the old liveness ran out
// (the restarted node, alone, claims its predecessor).
func TestPresencedRestartedUnderTheSameName(t *testing.T) {
	bin := presencedtest.Build(t)
	const users = 300
	// A 4 s timeout: a live node's renewal may run 2 s late on a loaded
	// machine before others take it for dead.
	const slots, tick = 11, 400 * time.Millisecond
	timeout := (slots - 1) * tick
	for _, tc := range []struct {
		name    string
		expired bool
	}{{"at once", false}, {"after the lease ran out", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t)
			hook := newHookReceiver(t)
			start := func(node string) *presencedtest.Process {
				return presencedtest.Start(t, bin, "-redis", "redis://"+srv.addr()+"/0", "-node", node,
					"-slots", fmt.Sprint(slots), "-tick", tick.String(), "-webhook", hook.srv.URL+"/presence")
			}
			n1 := start("n1")
			if !tc.expired {
				start("n2")
			}
			uids := userIDs("u", users)
			holdUsers(t, n1.Addr, uids)
			require.Eventually(t, func() bool { return hook.every(uids, "online", "join lobby") }, processWait,
				20*time.Millisecond, "every user's online and join at the webhook")

			require.NoError(t, n1.Signal(syscall.SIGKILL))
			n1.Wait()
			killed := time.Now()
			if tc.expired {
				waitNoLiveness(t, srv.client(t), "presenced", DefaultShards)
			}
			n1.Restart()
			restarted := time.Now()
			t.Logf("restarted %v after the SIGKILL", restarted.Sub(killed).Round(time.Millisecond))
			require.Eventually(t, func() bool { return hook.every(uids, "offline", "leave lobby") }, processWait,
				20*time.Millisecond, "every old user's offline and leave at the webhook")
			last := hook.lastAt("offline")
			from, since := killed, "SIGKILL"
			if tc.expired {
				from, since = restarted, "restart"
			}
			t.Logf("%d users: %s to the last offline %v, SIGKILL to it %v (timeout %v)", users, since,
				last.Sub(from).Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond), timeout)
			assert.LessOrEqual(t, last.Sub(from), 2*timeout, "%s to the last offline", since)

			time.Sleep(timeout / 2) // three claim rounds: a repeat would show
			total, twice := hook.tally(uids, "offline", "leave lobby")
			t.Logf("%d offlines, %d leaves, %d users with an edge twice, %d repeated deliveries",
				total["offline"], total["leave lobby"], twice, hook.repeated())
			assert.Equal(t, users, total["offline"], "offlines")
			assert.Equal(t, users, total["leave lobby"], "leaves")
			assert.Zero(t, twice, "users with an edge twice")
		})
	}
}
