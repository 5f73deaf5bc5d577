package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ciKinds are the fault kinds of the short schedule CI runs: every kind of
// the single mode (see nemesis.go).
var ciKinds = modeKinds["single"]

// ciSeeds are the short schedule's seeds, chosen so that together they
// draw every kind of ciKinds (TestCISeedsDrawEveryKind).
var ciSeeds = []uint64{1, 9, 37}

// ciConfig is the short schedule of seed, with the replaying backend. In a
// minute the log trims nothing: its snapshots come after the Redis losses
// the schedule draws (a new epoch of the log answers 410).
func ciConfig(seed uint64) config {
	return config{seed: seed, mode: "single", kinds: ciKinds, span: time.Minute, clients: 60,
		gap: [2]time.Duration{recovery, recovery + 2*time.Second}, lifetime: [2]time.Duration{time.Second, 8 * time.Second},
		replay: true}
}

func TestCISeedsDrawEveryKind(t *testing.T) {
	drawn := map[kind]bool{}
	for _, seed := range ciSeeds {
		c := ciConfig(seed)
		for _, f := range schedule(seed, c.kinds, nodes, warmup, c.span, c.gap) {
			drawn[f.kind] = true
		}
	}
	for _, k := range ciKinds {
		assert.True(t, drawn[k], "no seed of ciSeeds draws %s: pick seeds that do", k)
	}
}

// The short fixed-seed schedules: the fault kinds of ciKinds on three real
// presenced nodes, 60 clients, then heal, settle and check. A failure
// prints the seed and each anomaly with its timeline; go run ./faults
// -kinds K -logs DIR tries the failing kind at length and keeps the
// processes' logs.
func TestShortSchedule(t *testing.T) {
	ctx, bin, server, cli := processes(t, "the fault schedule runs for minutes", 8*time.Minute)
	for _, seed := range ciSeeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			cfg := ciConfig(seed)
			cfg.bin, cfg.redis, cfg.redisCLI, cfg.dir, cfg.logf = bin, server, cli, t.TempDir(), t.Logf
			res, err := run(ctx, cfg)
			require.NoError(t, err)
			if report := res.history.report(seed, cfg.mode); len(res.anomalies) > 0 {
				t.Error(report)
			} else {
				t.Log(report)
			}
			assert.GreaterOrEqual(t, len(res.history.ivs), 60, "connections")
		})
	}
}

// processes prepares a test that runs Redis and presenced for up to d: it
// skips with why in -short mode, finds Redis's binaries and builds
// presenced; ctx ends after d.
func processes(t *testing.T, why string, d time.Duration) (ctx context.Context, bin, server, cli string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	server, cli = lookBin(t, "redis-server"), lookBin(t, "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	bin, err := buildPresenced(ctx, t.TempDir())
	require.NoError(t, err)
	return ctx, bin, server, cli
}

// lookBin finds a binary; without it the test skips, unless CI is set.
func lookBin(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found and CI is set: install it (apt-get install redis-server redis-tools): %v", name, err)
		}
		t.Skipf("%s not found; install it (apt-get install redis-server redis-tools) to run the fault test", name)
	}
	return p
}
