package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startSentinel starts a Redis Sentinel on a free loopback port that
// monitors master as "m" and fails it over a second after it stops answering.
func startSentinel(t *testing.T, master *redisServer) string {
	t.Helper()
	return startSentinelQuorum(t, master, 1)
}

// startSentinelQuorum is startSentinel for one of several Sentinels, quorum
// of which must agree that the master is down.
func startSentinelQuorum(t *testing.T, master *redisServer, quorum int) string {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, "port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor m 127.0.0.1 %d %d\nsentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 3000\n",
		port, dir, master.port, quorum), 0o600))
	s := &redisServer{t: t, bin: master.bin, port: port, dir: dir}
	s.cmd = exec.Command(master.bin, conf, "--sentinel")
	s.cmd.Dir = dir
	require.NoError(t, s.cmd.Start())
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	t.Cleanup(s.kill)
	require.Eventually(t, func() bool { return s.ping() == nil }, testWait, 10*time.Millisecond, "sentinel on %s", s.addr())
	return s.addr()
}

// Redis Sentinel fails the master over to its replica: the nodes follow the
// new master, write again what it may lack, and nobody who stayed connected
// goes offline or leaves a channel; changes made meanwhile come through.
func TestSentinelFailover(t *testing.T) {
	master := startRedis(t)
	replica := startRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	sentinel := startSentinel(t, master)
	client := func() redis.UniversalClient {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{sentinel},
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 2 * time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := startNode(t, testConfig(client(), "a"))
	b := startNode(t, testConfig(client(), "b"))
	for _, n := range []*node{a, b} {
		n.follow(t, "stays", "arrives", "#room")
	}
	a.SetUser("stays", 1, 0)
	a.SetMember("room", "stays", 1, false)
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "stays online and in the room on "+n.Node(), func() bool {
			return n.rec.count("stays", true) == 1 && len(n.rec.membersOf("room")) == 1
		})
	}
	rc := replica.client(t)
	require.Eventually(t, func() bool {
		info, err := rc.Info(context.Background(), "replication").Result()
		return err == nil && infoField(info, "master_link_status") == "up"
	}, testWait, 20*time.Millisecond, "the replica syncs")

	master.kill()
	b.SetUser("arrives", 1, 0) // while the master is gone
	b.SetMember("room", "arrives", 1, false)
	require.Eventually(t, func() bool {
		info, err := rc.Info(context.Background(), "replication").Result()
		return err == nil && infoField(info, "role") == "master"
	}, 30*time.Second, 50*time.Millisecond, "sentinel promotes the replica")
	for _, n := range []*node{a, b} {
		n.rec.waitFor(t, testWait, "arrives online and in the room on "+n.Node(), func() bool {
			return n.rec.count("arrives", true) == 1 && slices.Equal(n.rec.membersOf("room"), []string{"arrives", "stays"})
		})
	}
	// Past a reconciliation and several claim rounds, nobody flickered.
	time.Sleep(testRenew + testTimeout)
	for _, n := range []*node{a, b} {
		assert.Equal(t, 0, n.rec.count("stays", false), "stays false offline on %s", n.Node())
		assert.Equal(t, []string{"+"}, n.rec.joinEdges("room", "stays"), "stays false leave on %s", n.Node())
	}
	count, users, err := a.Users(context.Background(), 10)
	require.NoError(t, err)
	assert.Equal(t, 2, count)
	assert.Equal(t, []string{"arrives", "stays"}, users)
}
