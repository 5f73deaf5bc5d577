package cluster

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node reaped while cut off from Redis, then met by a Redis that
// restarted empty, comes back with its online edges: the claim's offlines
// were sent, though Redis has lost the mark that the node was reaped. The
// claimer writes that mark back from what it remembers, either before the
// node returns or after the node put its records back quietly; each user
// ends with offline then online, once each, and no user who was never
// reaped gets an edge.
func TestReapedNodeMetByAnEmptyRedisComesBackWithEdges(t *testing.T) {
	for _, tc := range []struct {
		name         string
		claimerFirst bool // the claimer reaches the new Redis before the reaped node
	}{
		{name: "claimer first", claimerFirst: true},
		{name: "reaped node first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t)
			c := srv.client(t)
			pb := startProxy(t, srv.addr())
			b := startNode(t, testConfig(pb.client(t), "b"))
			pa := startProxy(t, srv.addr())
			a := startNode(t, testConfig(pa.client(t), "a"))
			uids := userIDs("u", 12)
			for _, uid := range uids {
				a.SetUser(uid, 1, 0)
			}
			b.SetUser("stays", 1, 0) // never reaped: no edge after its online
			made := func(uid string, on bool) int {
				return a.rec.producedCount(uid, on) + b.rec.producedCount(uid, on)
			}
			everyUser := func(on, off int) func() bool {
				return func() bool {
					for _, uid := range uids {
						if made(uid, true) != on || made(uid, false) != off {
							return false
						}
					}
					return true
				}
			}
			b.rec.waitFor(t, testWait, "every user online", everyUser(1, 0))

			pa.cut(true)
			b.rec.waitFor(t, testWait, "every user offline once a's lease ran out", everyUser(1, 1))
			if !tc.claimerFirst {
				pb.cut(true)
			}
			srv.restart()
			if tc.claimerFirst {
				b.rec.waitFor(t, testWait, "b writes back that it reaped a", func() bool {
					for s := range 4 {
						marked, err := c.ZRange(context.Background(), newShardKeys("t", s).tag+":reaped", 0, -1).Result()
						if err != nil || !slices.ContainsFunc(marked, func(n string) bool { return strings.HasPrefix(n, a.Node()) }) {
							return false
						}
					}
					return true
				})
				pa.cut(false)
			} else {
				pa.cut(false)
				a.rec.waitFor(t, testWait, "a puts its users back", func() bool {
					n, _, err := a.Users(context.Background(), 0)
					return err == nil && n == len(uids)
				})
				pb.cut(false)
			}
			b.rec.waitFor(t, testWait, "every user online again, once", everyUser(2, 1))
			eventually(t, "every user online in Redis", func(c *assert.CollectT) {
				n, _, err := b.Users(context.Background(), 0)
				assert.NoError(c, err)
				assert.Equal(c, len(uids)+1, n)
			})
			// A few claim and renewal rounds later, nothing more.
			time.Sleep(2 * testTimeout)
			for _, uid := range uids {
				assert.Equal(t, 2, made(uid, true), "online edges of %s", uid)
				assert.Equal(t, 1, made(uid, false), "offline edges of %s", uid)
			}
			require.Equal(t, 1, made("stays", true))
			assert.Equal(t, 0, made("stays", false))
		})
	}
}
