package cluster

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node reaped while cut off, back and written online again, then met by
// a loss of Redis's data before its claimer heard it was back: its users
// went offline once and online once, and they are still connected, so
// they stay online with no edge more. The claimer still remembers the
// reap; a remembered reap must not take the node's quiet restore, nor a
// stale replica's mark, for a node that never came back.
func TestThirdOnlineAfterAReapAndALoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		// loss runs once node a was reaped (b made its users' offlines)
		// and b's link is cut: it brings a back, makes Redis lose data,
		// and restores every link.
		loss func(t *testing.T, e *thirdOnlineEnv)
	}{
		{name: "reaped node first", loss: func(t *testing.T, e *thirdOnlineEnv) {
			e.comeBack(t)
			e.srv.restart()
			e.a.rec.waitFor(t, testWait, "a puts its users back in the new redis", func() bool {
				n, _, err := e.a.Users(context.Background(), 0)
				return err == nil && n == len(e.uids)
			})
			e.pb.cut(false)
		}},
		{name: "claimer first", loss: func(t *testing.T, e *thirdOnlineEnv) {
			e.comeBack(t)
			e.pa.cut(true)
			e.srv.restart()
			e.pb.cut(false)
			c := e.srv.client(t)
			e.b.rec.waitFor(t, testWait, "b claims in every shard of the new redis", func() bool {
				for s := range 4 {
					if ok, err := c.HExists(context.Background(), newShardKeys("t", s).tag+":clock", "last").Result(); err != nil || !ok {
						return false
					}
				}
				return true
			})
			e.pa.cut(false)
		}},
		{name: "failover to a replica that missed the return", loss: func(t *testing.T, e *thirdOnlineEnv) {
			rc := e.replica.client(t)
			require.Eventually(t, func() bool {
				for s := range 4 {
					marked, err := rc.ZRange(context.Background(), newShardKeys("t", s).tag+":reaped", 0, -1).Result()
					if err != nil || !slices.ContainsFunc(marked, func(n string) bool { return strings.HasPrefix(n, e.a.Node()+"#") }) {
						return false
					}
				}
				return true
			}, testWait, 20*time.Millisecond, "the replica has a reaped in every shard")
			require.NoError(t, rc.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err())
			e.pb.cut(false)
			e.comeBack(t) // on the master alone
			e.pa.retarget(e.replica.addr())
			e.pb.retarget(e.replica.addr())
			e.srv.kill()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startThirdOnline(t)
			tc.loss(t, e)
			e.a.rec.waitFor(t, testWait, "every user online in the redis the nodes reach", func() bool {
				n, _, err := e.b.Users(context.Background(), 0)
				return err == nil && n == len(e.uids) && e.everyUser(func(es []presenceEdge) bool { return len(es) >= 3 })
			})
			// A few claim and renewal rounds later, nothing more.
			time.Sleep(3 * testTimeout)
			want, got := map[string]string{}, map[string]string{}
			for _, uid := range e.uids {
				want[uid], got[uid] = "on,off,on", edgeWords(mergedEdges(e.nodes, uid))
			}
			assert.Equal(t, want, got, "each user's edges, over both nodes")
			for _, uid := range e.uids {
				n, err := connsOf(context.Background(), e.b, uid)
				require.NoError(t, err)
				assert.Equal(t, 1, n, "connections of %s in redis", uid)
			}
		})
	}
}

// thirdOnlineEnv is two nodes behind proxies, a holding 8 users, reaped
// while cut off: every user has gone online and offline, and b's link is
// cut so that b does not hear a come back. A replica follows the server.
type thirdOnlineEnv struct {
	srv, replica *redisServer
	pa, pb       *proxy
	a, b         *node
	nodes        []*node
	uids         []string
}

func startThirdOnline(t *testing.T) *thirdOnlineEnv {
	e := &thirdOnlineEnv{srv: startRedis(t), replica: startRedis(t), uids: userIDs("u", 8)}
	replicate(t, e.replica, e.srv)
	e.pb = startProxy(t, e.srv.addr())
	e.b = startNode(t, testConfig(e.pb.client(t), "b"))
	e.pa = startProxy(t, e.srv.addr())
	e.a = startNode(t, testConfig(e.pa.client(t), "a"))
	e.nodes = []*node{e.a, e.b}
	for _, uid := range e.uids {
		e.a.SetUser(uid, 1, 0)
	}
	e.waitEdges(t, "on")
	e.pa.cut(true)
	e.waitEdges(t, "on,off") // b reaped a
	e.pb.cut(true)
	return e
}

// comeBack restores a's link and waits until a wrote its users online again.
func (e *thirdOnlineEnv) comeBack(t *testing.T) {
	e.pa.cut(false)
	e.waitEdges(t, "on,off,on")
}

// waitEdges waits until every user's edges are words.
func (e *thirdOnlineEnv) waitEdges(t *testing.T, words string) {
	t.Helper()
	e.a.rec.waitFor(t, testWait, "every user's edges "+words, func() bool {
		return e.everyUser(func(es []presenceEdge) bool { return edgeWords(es) == words })
	})
}

func (e *thirdOnlineEnv) everyUser(ok func([]presenceEdge) bool) bool {
	for _, uid := range e.uids {
		if !ok(mergedEdges(e.nodes, uid)) {
			return false
		}
	}
	return true
}

// replicate makes replica follow master and waits until it is in sync.
func replicate(t *testing.T, replica, master *redisServer) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: replica.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	defer rc.Close()
	require.NoError(t, rc.Do(context.Background(), "REPLICAOF", "127.0.0.1", strconv.Itoa(master.port)).Err())
	require.Eventually(t, func() bool {
		return replicationField(rc, "master_link_status") == "up"
	}, testWait, 20*time.Millisecond, "the replica syncs")
}
