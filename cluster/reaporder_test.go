package cluster

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// A dead node's users, and a stopping node's, leave their channels before
// they go offline, as when they really leave, though their memberships
// live in other shards than their records and outnumber what one call
// reaps: the edges are made in that order, for a webhook receiver too.
func TestReapMakesLeavesBeforeOffline(t *testing.T) {
	const users, channels = 3, 150 // about 110 memberships a shard: more than one call reaps
	for _, how := range []string{"claimed after a crash", "left on shutdown"} {
		t.Run(how, func(t *testing.T) {
			srv := startRedis(t)
			a := startNode(t, testConfig(srv.client(t), "a"))
			b := startNode(t, testConfig(srv.client(t), "b"))
			for u := range users {
				uid := fmt.Sprintf("u%d", u)
				a.SetUser(uid, 1, 0)
				for c := range channels {
					a.SetMember(fmt.Sprintf("ch%d", c), uid, 1, false)
				}
			}
			ctx := context.Background()
			a.rec.waitFor(t, testWait, "every membership in Redis", func() bool {
				for c := range channels {
					n, _, err := b.Members(ctx, fmt.Sprintf("ch%d", c), "", 1)
					if err != nil || n != users {
						return false
					}
				}
				return true
			})
			rec := b.rec
			if how == "claimed after a crash" {
				a.crash()
			} else {
				rec = a.rec
				require.NoError(t, a.Withdraw(ctx))
			}
			rec.waitFor(t, testWait, "every user offline", func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return countKind(rec.made, presence.EdgeOffline) == users
			})
			rec.mu.Lock()
			made := append([]presence.Edge(nil), rec.made...)
			rec.mu.Unlock()
			leaves := map[string]int{}
			for i, e := range made {
				switch e.Kind {
				case presence.EdgeLeave:
					leaves[e.UID]++
				case presence.EdgeOffline:
					assert.Equal(t, channels, leaves[e.UID], "%s: leaves made before its offline (edge %d of %d)", e.UID, i, len(made))
				}
			}
			assert.Equal(t, users*channels, countKind(made, presence.EdgeLeave), "every leave made once")
		})
	}
}

func countKind(edges []presence.Edge, kind presence.EdgeKind) int {
	n := 0
	for _, e := range edges {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
