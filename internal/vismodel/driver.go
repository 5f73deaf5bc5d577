package vismodel

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	flagSteps = flag.Int("visibility.steps", 0, "operations in each visibility model history (0: the test's own)")
	flagSeeds = flag.Int("visibility.seeds", 0, "visibility model histories (0: the test's own)")
	flagSeed  = flag.Uint64("visibility.seed", 0, "run the visibility model for this seed only")
	flagHide  = flag.Bool("visibility.hidejoin", false, "histories with HideJoin, even where the test leaves it out")
)

// A Regression is a history that found a divergence once.
type Regression struct {
	Seed  uint64
	Steps int
}

// Config is one model test: its histories and where each runs.
type Config struct {
	Steps, Seeds int  // per history, and how many; -visibility.steps and -visibility.seeds win
	Leases       bool // histories with heartbeats and lapses
	HideJoin     bool // histories with HideJoin
	Regressions  []Regression
	// NewEnv makes a fresh Env for one run, and what releases it.
	NewEnv func() (Env, func())
	// ShrinkFor bounds the search for the shortest failing history; 0:
	// an hour.
	ShrinkFor time.Duration
}

// Test runs cfg's regressions, then its seeds, each seed logged, and
// fails t with the seed and the shortest history found that fails.
func Test(t *testing.T, cfg Config) {
	steps, seeds := cfg.Steps, cfg.Seeds
	if *flagSteps > 0 {
		steps = *flagSteps
	}
	if *flagSeeds > 0 {
		seeds = *flagSeeds
	}
	list := append([]Regression(nil), cfg.Regressions...)
	base := uint64(time.Now().UnixNano())
	for i := range seeds {
		list = append(list, Regression{base + uint64(i), steps})
	}
	if *flagSeed != 0 {
		list = []Regression{{*flagSeed, steps}}
	}
	t.Logf("%d regressions, then %d seeds from %d, %d operations each", len(cfg.Regressions), seeds, base, steps)
	run := func(ops []Op) error {
		env, release := cfg.NewEnv()
		defer release()
		return Run(ops, env)
	}
	for _, r := range list {
		ops := History(r.Seed, r.Steps, cfg.Leases, cfg.HideJoin || *flagHide)
		err := run(ops)
		if err == nil {
			continue
		}
		t.Logf("seed %d failed: %v; shrinking", r.Seed, err)
		shrinkFor := cfg.ShrinkFor
		if shrinkFor == 0 {
			shrinkFor = time.Hour
		}
		deadline := time.Now().Add(shrinkFor)
		short, serr := Shrink(ops, err, func(ops []Op) error {
			if time.Now().After(deadline) {
				return nil // out of time: keep the shortest found so far
			}
			return run(ops)
		})
		var b strings.Builder
		for _, op := range short {
			fmt.Fprintf(&b, "\n  %v", op)
		}
		require.NoError(t, serr, "seed %d (-visibility.seed=%d -visibility.steps=%d): shortest failing history found (%d of %d operations):%s",
			r.Seed, r.Seed, r.Steps, len(short), len(ops), b.String())
	}
}
