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

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// TestMeasureRedisCost measures, with the default timings (30 s timeout),
// what 100k online users, each a member of 5 channels, spread over two nodes
// cost Redis in steady state; then a reconnect storm of 10k users; then how
// long a crashed node's users take to go offline. It takes about three
// minutes, so it runs only with PRESENCED_MEASURE=1.
func TestMeasureRedisCost(t *testing.T) {
	if os.Getenv("PRESENCED_MEASURE") == "" {
		t.Skip("set PRESENCED_MEASURE=1 to measure the Redis cost (takes about three minutes)")
	}
	const users, perUser, channels, storm = 100_000, 5, 20_000, 10_000
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
	// Each node follows a few rooms, as its clients would: the rest of the
	// traffic never reaches it.
	var topics []string
	for i := range 20 {
		a.follow(t, "#room"+strconv.Itoa(i))
		topics = append(topics, a.topicName(presence.Topic{Channel: "room" + strconv.Itoa(i)}))
	}
	// What was published on a's topics, counted by a plain subscriber.
	relevant := listen(t, admin, topics...)
	join := func(n *node, i int, on bool) {
		uid := "user" + strconv.Itoa(i)
		conns := 0
		if on {
			conns = 1 + i%3
		}
		n.SetUser(uid, conns, 0)
		for j := range perUser {
			c := 0
			if on {
				c = 1
			}
			n.SetMember("room"+strconv.Itoa((i*perUser+j*7919)%channels), uid, c, false)
		}
	}
	for i := range users {
		join([]*node{a, b}[i%2], i, true)
	}
	a.rec.waitFor(t, 2*time.Minute, "100k online, every membership written", func() bool {
		count, _, err := a.Users(ctx, 0)
		return err == nil && count == users && testutil.ToFloat64(a.m.pending) == 0 && testutil.ToFloat64(b.m.pending) == 0
	})
	// The last batches may still be in flight: let them land.
	time.Sleep(2 * time.Second)
	mem, err := admin.Info(ctx, "memory").Result()
	require.NoError(t, err)
	t.Logf("redis used_memory with %d users in %d channels each on 2 nodes: %s", users, perUser, infoField(mem, "used_memory_human"))

	measure := func(what string, d time.Duration, during func()) {
		t.Helper()
		require.NoError(t, admin.ConfigResetStat(ctx).Err())
		cpu0 := redisCPU(t, admin)
		start := time.Now()
		if during != nil {
			during()
		}
		time.Sleep(time.Until(start.Add(d)))
		stats, err := admin.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		secs := time.Since(start).Seconds()
		cpu := redisCPU(t, admin) - cpu0
		var lines []string
		var calls, usec float64
		for _, line := range strings.Split(stats, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_config|resetstat" {
				continue
			}
			c, u := statField(rest, "calls"), statField(rest, "usec")
			calls += c
			usec += u
			lines = append(lines, fmt.Sprintf("  %-16s %10.2f calls/s %10.0f usec/s", strings.TrimPrefix(name, "cmdstat_"), c/secs, u/secs))
		}
		sort.Strings(lines)
		t.Logf("%s over %.0fs (%d users, %d memberships, 2 nodes, 16 shards, renew every 10s, claim every 5s):\n%s\n  all commands (scripts' own calls included): %.1f/s; command time %.2f ms/s; Redis process CPU %.3f s/s (%.2f%% of one core)",
			what, secs, users, users*perUser, strings.Join(lines, "\n"), calls/secs, usec/secs/1000, cpu/secs, 100*cpu/secs)
	}
	measure("steady state", window, nil)
	// The worst case of a reconnect storm: 10k of b's users all leave (their
	// connections dropped), then all come back on a, so every one of them
	// makes an offline and an online edge and 5 leaves and 5 joins.
	settled := func(n *node) func() bool {
		return func() bool { return testutil.ToFloat64(n.m.pending) == 0 }
	}
	measure("reconnect storm of 10k users", 20*time.Second, func() {
		for i := range storm {
			join(b, 2*i+1, false)
		}
		b.rec.waitFor(t, time.Minute, "b's writes land", settled(b))
		for i := range storm {
			join(a, 2*i+1, true)
		}
		a.rec.waitFor(t, time.Minute, "a's writes land", settled(a))
	})

	crashed := time.Now()
	b.crash()
	b.stopRun()
	a.rec.waitFor(t, 2*time.Minute, "b's users offline", func() bool {
		count, _, err := a.Users(ctx, 0)
		return err == nil && count == users/2+storm
	})
	t.Logf("crash to offline for the %d users of the crashed node (timeout 30s): last %v after the crash", users/2-storm, time.Since(crashed))
	relevant.mu.Lock()
	published := 0
	for _, evs := range relevant.got {
		published += len(evs)
	}
	relevant.mu.Unlock()
	t.Logf("routing: node a follows 20 of %d channels; Redis delivered it %.0f messages, and %d were published on those 20 topics over the whole run",
		channels, testutil.ToFloat64(a.m.received), published)
}

// redisCPU is the Redis process's CPU seconds so far (user + system).
func redisCPU(t *testing.T, c redis.UniversalClient) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	require.NoError(t, err)
	u, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	s, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	return u + s
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
