package presence_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/vismodel"
	"github.com/presenced/presenced/presence"
)

// The visibility model on one Node (see package vismodel): 20 seeds of 150
// operations, 3 under -short; -visibility.seeds and -visibility.steps run
// more, -visibility.seed one.
func TestVisibilityModel(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 3
	}
	vismodel.Test(t, vismodel.Config{
		Steps: 150, Seeds: seeds, Leases: true, HideJoin: true,
		Regressions: []vismodel.Regression{
			{Seed: 1795891162838569890, Steps: 150}, // a user's first connection closed: the view lost its second
			{Seed: 1795892382124267184, Steps: 150}, // a record changed while its user was out of a channel it left and rejoined in a tick
		},
		NewEnv: func() (vismodel.Env, func()) {
			n, err := presence.New(presence.Config{Slots: vismodel.Slots})
			require.NoError(t, err)
			return vismodel.Env{Nodes: []*presence.Node{n}}, n.Close
		},
	})
}
