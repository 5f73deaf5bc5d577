package cluster

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Redis Cluster topology changes under churn on two nodes: the slot of the
// churned channel's topic changes owner (a failover, a master killed, a
// migration), Redis ends the subscriptions there, and each node makes them
// again on the new owner. The diffs resume, the member sets come out exact
// on both nodes, and every edge is made once (testChurn).

func TestClusterFailoverUnderChurn(t *testing.T) {
	testTopologyUnderChurn(t, "CLUSTER FAILOVER", func(rc *redisCluster, slot int64) {
		_, replica := rc.owners(slot)
		require.NoError(t, rc.plain(replica).ClusterFailover(context.Background()).Err())
		rc.waitOwner(slot, replica)
	})
}

// A master killed takes with it the replies of the writes it ran last, and
// its replica may lack them: a node that did not hear that its change
// landed writes it again. So the edges of users that churned across the
// kill are counted, not held to alternating (a lost reply, not a topology
// change); stable users, the member sets and the resumed diffs are held.
func TestClusterMasterKilledUnderChurn(t *testing.T) {
	testTopologyUnderChurn(t, "SIGKILL of the master", func(rc *redisCluster, slot int64) {
		master, replica := rc.owners(slot)
		master.kill()
		rc.waitOwner(slot, replica)
	})
}

func TestClusterSlotMigratedUnderChurn(t *testing.T) {
	testTopologyUnderChurn(t, "slot migration", func(rc *redisCluster, slot int64) {
		master, _ := rc.owners(slot)
		var to *redisServer
		for _, s := range rc.nodes {
			if s != master && rc.role(s) == "master" {
				to = s
				break
			}
		}
		require.NotNil(t, to, "another master")
		rc.migrate(slot, master, to)
		rc.waitOwner(slot, to)
	})
}

// testTopologyUnderChurn runs testChurn on a Redis Cluster of three masters
// and their replicas, with fault changing the owner of the slot of the
// channel testChurn churns. It logs how long b heard none of a's member
// edges, and holds it to a bound generous enough for a busy machine.
func testTopologyUnderChurn(t *testing.T, what string, fault func(rc *redisCluster, slot int64)) {
	rc := startRedisClusterReplicas(t, 1)
	rc.waitReplicas()
	topic := newShardKeys("t", roomShard(4)).channelTopic("room")
	slot, err := rc.client(t).ClusterKeySlot(context.Background(), topic).Result()
	require.NoError(t, err)
	var took time.Duration
	res := testChurn(t, churnSetup{client: func() redis.UniversalClient { return rc.client(t) }}, func() time.Time {
		began := time.Now()
		fault(rc, slot)
		took = time.Since(began)
		return began
	})
	t.Logf("%s of slot %d (%s): done in %v; longest gap in b's member edges of a's users %v; member sets exact %v after it began; %d churned users whose edges do not alternate",
		what, slot, topic, took.Round(time.Millisecond), res.gap.Round(time.Millisecond), res.exact.Round(time.Millisecond), res.unequal)
	// The gap covers the fault itself (a killed master is replaced after
	// cluster-node-timeout, 2 s here), then the making of the subscription
	// again: a bound far below the renewal-driven recovery of a lost
	// subscription, and below the test's own waits.
	assert.Less(t, res.gap, took+testWait/2, "b heard a's member edges again after the %s", what)
}

// roomShard is the shard of the channel "room" among shards, as base.shard
// computes it.
func roomShard(shards int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte("room"))
	return int(h.Sum32() % uint32(shards))
}

// owners returns the master that owns slot and its replica.
func (r *redisCluster) owners(slot int64) (master, replica *redisServer) {
	r.t.Helper()
	shards, err := r.live().ClusterShards(context.Background()).Result()
	require.NoError(r.t, err)
	for _, sh := range shards {
		if !hasSlot(sh, slot) {
			continue
		}
		for _, n := range sh.Nodes {
			s := r.byPort(n.Port)
			switch {
			case s == nil || n.Health != "online":
			case n.Role == "master":
				master = s
			default:
				replica = s
			}
		}
	}
	require.NotNil(r.t, master, "the master of slot %d", slot)
	require.NotNil(r.t, replica, "the replica of slot %d", slot)
	return master, replica
}

func hasSlot(sh redis.ClusterShard, slot int64) bool {
	for _, rng := range sh.Slots {
		if int64(rng.Start) <= slot && slot <= int64(rng.End) {
			return true
		}
	}
	return false
}

func (r *redisCluster) byPort(port int64) *redisServer {
	for _, s := range r.nodes {
		if int64(s.port) == port {
			return s
		}
	}
	return nil
}

// live returns a client of a node that runs.
func (r *redisCluster) live() *redis.Client {
	for _, s := range r.nodes {
		if s.cmd != nil {
			return r.plain(s)
		}
	}
	r.t.Fatal("no node of the cluster runs")
	return nil
}

func (r *redisCluster) role(s *redisServer) string {
	return replicationField(r.plain(s), "role")
}

// waitReplicas waits until every master has a replica in sync.
func (r *redisCluster) waitReplicas() {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		masters := 0
		for _, s := range r.nodes {
			info, err := r.plain(s).Info(context.Background(), "replication").Result()
			if err != nil {
				return false
			}
			if infoField(info, "role") == "master" {
				if !strings.Contains(info, "state=online") {
					return false
				}
				masters++
			}
		}
		return masters == 3
	}, testWait, 50*time.Millisecond, "every master has a replica in sync")
}

// waitOwner waits until every running node of the cluster names owner the
// master of slot.
func (r *redisCluster) waitOwner(slot int64, owner *redisServer) {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		for _, s := range r.nodes {
			if s.cmd == nil {
				continue
			}
			shards, err := r.plain(s).ClusterShards(context.Background()).Result()
			if err != nil {
				return false
			}
			ok := false
			for _, sh := range shards {
				for _, n := range sh.Nodes {
					if hasSlot(sh, slot) && n.Role == "master" && n.Port == int64(owner.port) {
						ok = true
					}
				}
			}
			if !ok {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "%s owns slot %d on every node", owner.addr(), slot)
}

// migrate moves slot from one master to another the way redis-cli's
// reshard does: mark it importing and migrating, move its keys, then give
// it to its new owner on both and on every other master.
func (r *redisCluster) migrate(slot int64, from, to *redisServer) {
	r.t.Helper()
	ctx := context.Background()
	src, dst := r.plain(from), r.plain(to)
	srcID, err := src.ClusterMyID(ctx).Result()
	require.NoError(r.t, err)
	dstID, err := dst.ClusterMyID(ctx).Result()
	require.NoError(r.t, err)
	s := strconv.FormatInt(slot, 10)
	require.NoError(r.t, dst.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", srcID).Err())
	require.NoError(r.t, src.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", dstID).Err())
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		require.NoError(r.t, err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		require.NoError(r.t, src.Do(ctx, args...).Err(), "MIGRATE %d keys", len(keys))
	}
	require.NoError(r.t, dst.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", dstID).Err())
	require.NoError(r.t, src.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", dstID).Err())
	for _, n := range r.nodes {
		if n != from && n != to && n.cmd != nil && r.role(n) == "master" {
			require.NoError(r.t, r.plain(n).Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", dstID).Err(), fmt.Sprintf("SETSLOT on %s", n.addr()))
		}
	}
}

// plain returns a client of one node of the cluster, the same each time.
func (r *redisCluster) plain(s *redisServer) *redis.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plains == nil {
		r.plains = map[*redisServer]*redis.Client{}
	}
	c := r.plains[s]
	if c == nil {
		c = s.client(r.t)
		r.plains[s] = c
	}
	return c
}
