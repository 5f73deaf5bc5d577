package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// redisCluster is a real Redis Cluster of three masters on loopback, with
// or without a replica each.
type redisCluster struct {
	t     *testing.T
	nodes []*redisServer // as created

	mu     sync.Mutex
	plains map[*redisServer]*redis.Client
}

// startRedisCluster starts the cluster of three masters, no replicas, and
// waits until every master serves its slots; it skips when redis-server or
// redis-cli is missing, unless CI is set.
func startRedisCluster(t *testing.T) *redisCluster {
	return startRedisClusterReplicas(t, 0)
}

// startRedisClusterReplicas is startRedisCluster with replicas replicas of
// each master.
func startRedisClusterReplicas(t *testing.T, replicas int) *redisCluster {
	t.Helper()
	server, cli := lookRedisBin(t, "redis-server"), lookRedisBin(t, "redis-cli")
	began := time.Now()
	r := &redisCluster{t: t}
	create := []string{"--cluster", "create"}
	for _, port := range clusterPorts(t, 3*(1+replicas)) {
		s := &redisServer{t: t, bin: server, port: port, dir: t.TempDir(), extra: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}}
		t.Cleanup(s.kill) // before start, which may fail the test
		s.start()
		r.nodes = append(r.nodes, s)
		create = append(create, s.addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	create = append(create, "--cluster-replicas", strconv.Itoa(replicas))
	out, err := exec.CommandContext(ctx, cli, append(create, "--cluster-yes")...).CombinedOutput()
	cancel()
	require.NoError(t, err, "redis-cli --cluster create:\n%s", out)
	r.waitReady(30 * time.Second)
	t.Logf("redis cluster %v ready in %v", r.addrs(), time.Since(began).Round(time.Millisecond))
	return r
}

// lookRedisBin finds a Redis binary, or skips the test (fails it under CI).
func lookRedisBin(t *testing.T, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found and CI is set: install it (apt-get install redis-server redis-tools): %v", name, err)
		}
		t.Skipf("%s not found; install it (apt-get install redis-server redis-tools) to run the Redis Cluster tests", name)
	}
	return bin
}

// clusterPorts returns n free loopback ports whose cluster bus ports (+10000)
// are free too. Every listener stays open until all are picked, so no port
// comes back twice.
func clusterPorts(t *testing.T, n int) []int {
	t.Helper()
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	listen := func(addr string) (int, bool) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return 0, false
		}
		held = append(held, l)
		return l.Addr().(*net.TCPAddr).Port, true
	}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		require.Less(t, tries, 100, "no free port pairs for the Redis Cluster")
		port, ok := listen("127.0.0.1:0")
		require.True(t, ok, "listen on a free loopback port")
		if port == 6379 || port+10000 > 65535 {
			continue
		}
		if _, ok := listen("127.0.0.1:" + strconv.Itoa(port+10000)); ok {
			ports = append(ports, port)
		}
	}
	return ports
}

func (r *redisCluster) addrs() []string {
	addrs := make([]string, len(r.nodes))
	for i, s := range r.nodes {
		addrs[i] = s.addr()
	}
	return addrs
}

// client returns a cluster client seeded with every master, closed at cleanup.
func (r *redisCluster) client(t *testing.T) *redis.ClusterClient {
	c := r.newClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (r *redisCluster) newClient() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.addrs(), ContextTimeoutEnabled: true,
		PoolSize: 40, DialTimeout: 200 * time.Millisecond})
}

// waitReady polls until every node says cluster_state:ok and a cluster
// client can write and read a key on each master: state ok alone does not
// mean a fresh client's view of the slots is complete.
func (r *redisCluster) waitReady(within time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	plain := make([]*redis.Client, len(r.nodes))
	for i, s := range r.nodes {
		plain[i] = s.client(r.t)
	}
	cc := r.newClient()
	defer cc.Close()
	var keys []string // one per master
	var err error
	for {
		if keys == nil {
			keys, err = r.readyCheckState(ctx, plain)
		}
		if keys != nil {
			if err = readyCheckKeys(ctx, cc, keys); err == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("redis cluster %v not ready: %v", r.addrs(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readyCheckState checks cluster_state:ok on every node, then returns a key
// in the slots of each master.
func (r *redisCluster) readyCheckState(ctx context.Context, plain []*redis.Client) ([]string, error) {
	for i, c := range plain {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER INFO on %s: %w", r.nodes[i].addr(), err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return nil, fmt.Errorf("%s: cluster_state not ok", r.nodes[i].addr())
		}
	}
	shards, err := plain[0].ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	keys := map[string]string{} // master address to a key it owns
	for i := 0; len(keys) < countMasters(shards) && i < 1000; i++ {
		key := fmt.Sprintf("{harness:%d}:ready", i)
		slot, err := plain[0].ClusterKeySlot(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					for _, n := range sh.Nodes {
						addr := n.IP + ":" + strconv.FormatInt(n.Port, 10)
						if n.Role == "master" && keys[addr] == "" {
							keys[addr] = key
						}
					}
				}
			}
		}
	}
	if masters := countMasters(shards); len(keys) < masters || masters < 3 {
		return nil, fmt.Errorf("slots spread over %d of %d masters, want 3", len(keys), masters)
	}
	var out []string
	for _, k := range keys {
		out = append(out, k)
	}
	return out, nil
}

// countMasters counts the shards that serve slots.
func countMasters(shards []redis.ClusterShard) int {
	n := 0
	for _, sh := range shards {
		if len(sh.Slots) > 0 {
			n++
		}
	}
	return n
}

func readyCheckKeys(ctx context.Context, cc *redis.ClusterClient, keys []string) error {
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		err := cc.Set(ctx, k, "ok", 0).Err()
		if err == nil {
			var v string
			if v, err = cc.Get(ctx, k).Result(); err == nil && v != "ok" {
				err = fmt.Errorf("GET %s = %q", k, v)
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s through the cluster client: %w", k, err)
		}
	}
	return nil
}

func TestRedisClusterHarness(t *testing.T) {
	r := startRedisCluster(t)
	c := r.client(t)
	ctx := context.Background()

	nodes, err := c.ClusterNodes(ctx).Result()
	require.NoError(t, err)
	masters, covered := 0, make([]bool, 16384)
	for line := range strings.Lines(strings.TrimSpace(nodes)) {
		// <id> <addr> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 8, "CLUSTER NODES line %q", line)
		if !strings.Contains(f[2], "master") {
			continue
		}
		masters++
		assert.Equal(t, "connected", f[7], "link of %s", f[1])
		for _, rng := range f[8:] {
			lo, hi, _ := strings.Cut(rng, "-")
			if hi == "" {
				hi = lo
			}
			from, err := strconv.Atoi(lo)
			require.NoError(t, err, "slot range %q", rng)
			to, err := strconv.Atoi(hi)
			require.NoError(t, err, "slot range %q", rng)
			for s := from; s <= to; s++ {
				assert.False(t, covered[s], "slot %d owned twice", s)
				covered[s] = true
			}
		}
	}
	assert.Equal(t, 3, masters, "masters in CLUSTER NODES:\n%s", nodes)
	for s, ok := range covered {
		require.True(t, ok, "slot %d not covered:\n%s", s, nodes)
	}

	for i := range 16 {
		key := fmt.Sprintf("{presenced:%d}:x", i)
		require.NoError(t, c.Set(ctx, key, i, 0).Err(), key)
		v, err := c.Get(ctx, key).Int()
		require.NoError(t, err, key)
		assert.Equal(t, i, v, key)
	}
}

// The engine on a real 3-master Redis Cluster: every script touches one
// slot, shards spread over the masters, each shard's Pub/Sub connects to the
// master that owns it, and a crashed node's users go offline once.
func TestEngineOnRedisCluster(t *testing.T) {
	rc := startRedisCluster(t)
	cfg := func(name string) Config {
		c := testConfig(rc.client(t), name)
		c.Shards = 16
		return c
	}
	a := startNode(t, cfg("a"))
	b := startNode(t, cfg("b"))
	ctx := context.Background()
	var uids []string
	for i := range 12 { // spread over the shards, and so the masters
		uids = append(uids, fmt.Sprintf("c%02d", i))
	}
	b.follow(t, append(uids, "#lobby", "#hall")...)
	for _, uid := range uids {
		a.SetUser(uid, 1, 0)
		a.SetMember("lobby", uid, 1, false)
	}
	b.SetUser("c00", 1, 0)
	b.SetMember("hall", "c00", 1, false)
	b.rec.waitFor(t, testWait, "12 users online on b", func() bool {
		return len(b.rec.all()) == 12 && len(b.rec.membersOf("lobby")) == 12
	})
	// b shows its own c00 at once; both nodes' writes of c00 land on their
	// own time, each shard's on its own master.
	eventually(t, "both nodes' records of c00 written", func(c *assert.CollectT) {
		n, err := connsOf(ctx, b, "c00")
		assert.NoError(c, err)
		assert.Equal(c, 2, n)
	})
	count, users, err := b.Users(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, 12, count)
	assert.Equal(t, []string{"c00", "c01", "c02"}, users)
	count, members, err := a.Members(ctx, "lobby", "", 2)
	require.NoError(t, err)
	assert.Equal(t, 12, count)
	assert.Equal(t, []string{"c00", "c01"}, members)
	require.NoError(t, a.Publish(ctx, presence.Message{Channel: "lobby", Frame: encoded("chat", `{"type":"chat"}`)}))
	b.rec.waitFor(t, testWait, "chat on b", func() bool {
		b.rec.mu.Lock()
		defer b.rec.mu.Unlock()
		return len(b.rec.chats) == 1
	})

	a.crash()
	b.rec.waitFor(t, testWait, "a's users offline and out of the lobby", func() bool {
		return len(b.rec.all()) == 23 && len(b.rec.membersOf("lobby")) == 0
	})
	assert.Equal(t, 0, b.rec.count("c00", false), "c00 has a connection on b")
	assert.Equal(t, []string{"c00"}, b.rec.membersOf("hall"))
	// The claim's reply reaches b's writer a moment after its edges reach b's
	// reader.
	b.rec.waitFor(t, testWait, "b reaped each of a's users", func() bool {
		for _, uid := range uids[1:] {
			if b.rec.producedCount(uid, false) == 0 {
				return false
			}
		}
		return true
	})
	for _, uid := range uids[1:] {
		assert.Equal(t, 1, b.rec.producedCount(uid, false), "b reaped %s once", uid)
	}
}
