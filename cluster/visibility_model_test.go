package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/vismodel"
	"github.com/presenced/presenced/presence"
)

// The visibility model (see package vismodel) on two Nodes sharing a real
// Redis: connections spread over both, every node's keyless answers read
// from Redis, and each tick's frames checked once the nodes have heard
// each other's edges (the checks step both nodes again until they hold,
// for 5 s at most). Histories have no heartbeat leases, whose ends count
// exact ticks: the one-node model covers them.
func TestVisibilityModelTwoNodes(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.client(t)
	var runs atomic.Int64
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	vismodel.Test(t, vismodel.Config{
		Steps: 60, Seeds: seeds,
		HideJoin:  true,
		ShrinkFor: time.Minute,
		Regressions: []vismodel.Regression{
			{Seed: 1795903781110932588, Steps: 60},  // an invisible user's record let go by a node that then saw its join
			{Seed: 1795904696002386651, Steps: 100}, // an invisible user's record, delivered with its hidden-at before its online edge, let go
		},
		NewEnv: func() (vismodel.Env, func()) {
			prefix := fmt.Sprintf("vis%d", runs.Add(1)) // a fresh store for each run
			ctx, cancel := context.WithCancel(context.Background())
			var nodes []*presence.Node
			var engines []*Engine
			for _, name := range []string{"a", "b"} {
				cfg := testConfig(rdb, name)
				cfg.Prefix = prefix
				e, err := New(cfg)
				require.NoError(t, err)
				n, err := presence.New(presence.Config{Slots: vismodel.Slots, Engine: e})
				require.NoError(t, err)
				go func() { _ = e.Run(ctx) }()
				select {
				case <-e.health.reading:
				case <-time.After(testWait):
					t.Fatalf("node %s did not start reading", name)
				}
				nodes, engines = append(nodes, n), append(engines, e)
			}
			settle := func() {
				sctx, scancel := context.WithTimeout(ctx, testWait)
				defer scancel()
				for _, e := range engines {
					e.w.settle(sctx)
				}
			}
			release := func() {
				cctx, ccancel := context.WithTimeout(context.Background(), testWait)
				defer ccancel()
				for i, e := range engines {
					_ = e.Close(cctx)
					nodes[i].Close()
				}
				cancel()
			}
			return vismodel.Env{Nodes: nodes, Settle: settle, Converge: 5 * time.Second}, release
		},
	})
}
