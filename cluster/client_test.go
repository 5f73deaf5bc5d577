package cluster

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewClientKinds(t *testing.T) {
	cases := []struct {
		url     string
		cluster bool
		err     string
	}{
		{url: "redis://127.0.0.1:6390/2"},
		{url: "rediss://user:pw@127.0.0.1:6390/0"},
		{url: "redis://127.0.0.1:26379?master_name=mymaster&addr=127.0.0.1:26380"},
		{url: "redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001", cluster: true},
		{url: "http://127.0.0.1:6390", err: "invalid URL scheme"},
		{url: "redis://127.0.0.1:6390?no_such_option=1", err: "no_such_option"},
		{url: "redis://[::1", err: "redis URL"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			c, err := NewClient(tc.url)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			defer c.Close()
			_, isCluster := c.(*redis.ClusterClient)
			assert.Equal(t, tc.cluster, isCluster)
		})
	}
}

func TestNewClientReachesRedis(t *testing.T) {
	srv := startRedis(t)
	c, err := NewClient("redis://" + srv.addr() + "/3")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Ping(context.Background()).Err())
	e, err := New(Config{Client: c, Node: "n"})
	require.NoError(t, err)
	defer e.Close(context.Background())
	require.NoError(t, e.Health(context.Background()))
}
