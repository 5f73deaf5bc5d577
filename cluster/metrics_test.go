package cluster

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two engines share a Registerer under different namespaces; one whose
// registration fails part way leaves the Registerer as it was, so the same
// namespace registers once the conflict is gone.
func TestMetricsNamespace(t *testing.T) {
	srv := startRedis(t)
	reg := prometheus.NewRegistry()
	cfg := func(name, ns string) Config {
		c := testConfig(srv.client(t), name)
		c.Registerer, c.MetricsNamespace = reg, ns
		return c
	}
	startNode(t, cfg("a", ""))
	startNode(t, cfg("b", "other"))
	names := func() []string {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		var out []string
		for _, mf := range mfs {
			out = append(out, mf.GetName())
		}
		return out
	}
	assert.Contains(t, names(), "presenced_cluster_redis_up")
	assert.Contains(t, names(), "other_cluster_redis_up")

	// The last collector conflicts: the twelve before it were registered.
	unregistered, err := newMetrics(nil, "third")
	require.NoError(t, err)
	blocker := unregistered.publishedLate
	require.NoError(t, reg.Register(blocker))
	before := names()
	_, err = New(cfg("c", "third"))
	require.ErrorContains(t, err, "register metrics")
	assert.Equal(t, before, names())
	require.True(t, reg.Unregister(blocker))
	startNode(t, cfg("c", "third"))
	assert.Contains(t, names(), "third_cluster_redis_up")
}
