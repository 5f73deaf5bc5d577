package cluster

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestMeasureRedisCost measures, with the default timings (30 s timeout),
// what 100k online users spread over two nodes cost Redis in steady state,
// then how long a crashed node's users take to go offline. It takes about
// two minutes, so it runs only with PRESENCED_MEASURE=1.
func TestMeasureRedisCost(t *testing.T) {
	if os.Getenv("PRESENCED_MEASURE") == "" {
		t.Skip("set PRESENCED_MEASURE=1 to measure the Redis cost (takes about two minutes)")
	}
	const users = 100_000
	window := 60 * time.Second
	if s := os.Getenv("PRESENCED_MEASURE_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err)
		window = d
	}
	srv := startRedis(t)
	admin := srv.client(t)
	ctx := context.Background()
	newEngine := func(name string) *node {
		c := redis.NewClient(&redis.Options{Addr: srv.addr()})
		t.Cleanup(func() { _ = c.Close() })
		return startNode(t, Config{Client: c, Node: name})
	}
	a, b := newEngine("a"), newEngine("b")
	for i := range users {
		uid := "user" + strconv.Itoa(i)
		if i%2 == 0 {
			a.SetUser(uid, 1)
		} else {
			b.SetUser(uid, 1+i%3)
		}
	}
	a.rec.waitFor(t, time.Minute, "100k online", func() bool { return len(a.rec.all()) == users })
	count, _, err := a.Users(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, users, count)
	mem, err := admin.Info(ctx, "memory").Result()
	require.NoError(t, err)
	t.Logf("redis used_memory with %d users on 2 nodes: %s", users, infoField(mem, "used_memory_human"))

	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	start := time.Now()
	time.Sleep(window)
	stats, err := admin.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	secs := time.Since(start).Seconds()
	// Commands the scripts call count in commandstats too; keep them apart
	// from what the nodes send.
	inScript := map[string]bool{"time": true, "hget": true, "hset": true, "hdel": true, "hincrby": true,
		"zadd": true, "zrem": true, "zrangebyscore": true, "xadd": true}
	var lines []string
	var calls, usec, sent float64
	for _, line := range strings.Split(stats, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_config|resetstat" {
			continue
		}
		c := statField(rest, "calls")
		u := statField(rest, "usec")
		calls += c
		usec += u
		cmd := strings.TrimPrefix(name, "cmdstat_")
		where := "sent by nodes"
		if inScript[cmd] {
			where = "inside scripts"
		} else {
			sent += c
		}
		lines = append(lines, fmt.Sprintf("  %-16s %8.2f calls/s %8.0f usec/s  (%s)", cmd, c/secs, u/secs, where))
	}
	sort.Strings(lines)
	t.Logf("steady state over %.0fs, %d users, 2 nodes, 16 shards, renew every 10s, claim every 5s:\n%s\n  sent by the nodes: %.1f commands/s; counting calls inside scripts: %.1f/s; Redis CPU: %.2f ms per second (%.3f%% of one core)",
		secs, users, strings.Join(lines, "\n"), sent/secs, calls/secs, usec/secs/1000, usec/secs/1e4)

	crashed := time.Now()
	b.crash()
	b.stopRun()
	a.rec.waitFor(t, 2*time.Minute, "b's users offline", func() bool { return len(a.rec.all()) == users+users/2 })
	var first, last time.Duration
	for _, e := range a.rec.all()[users:] {
		d := e.at.Sub(crashed)
		if first == 0 || d < first {
			first = d
		}
		last = max(last, d)
	}
	t.Logf("crash to offline for %d users of the crashed node (timeout 30s): first %v, last %v", users/2, first, last)
}

func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return "?"
}

func statField(s, key string) float64 {
	for _, kv := range strings.Split(s, ",") {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
