package cluster

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// DefaultShards is the number of shards when Config.Shards is 0.
const DefaultShards = 16

// NewClient returns a go-redis client for rawURL, for Config.Client:
//
//	redis://[user:pass@]host:port/db                      one server (rediss:// for TLS)
//	redis://host:port?master_name=NAME&addr=host2:port    Sentinel: the sentinels' addresses
//	redis+cluster://host:port?addr=host2:port             Redis Cluster: seed nodes
//
// Other go-redis options can be set as query parameters (dial_timeout=3s ...).
// Context deadlines are honoured, so a stalled Redis cannot hold up a caller.
// An Engine on a Sentinel client made here hears Sentinel announce a new
// master and moves its subscriptions at once; on one made otherwise they
// move when Sentinel turns the old master into a replica, about 10 s later.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: redis URL: %w", err)
	}
	switch {
	case strings.HasSuffix(u.Scheme, "+cluster"):
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("cluster: redis cluster URL: %w", err)
		}
		// PoolSize keeps its default: go-redis dials Pub/Sub connections
		// (the engine's sharded Pub/Sub, one per shard with a followed
		// topic, to the master of its slot) outside the pool.
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o), nil
	case u.Query().Has("master_name"):
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("cluster: redis sentinel URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		return &failoverClient{Client: redis.NewFailoverClient(o), opt: o}, nil
	default:
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("cluster: redis URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		return redis.NewClient(o), nil
	}
}

// failoverClient is a Sentinel-backed client with the options it was made
// from, so that an Engine can listen to the Sentinels itself: go-redis
// moves its commands to a new master at once, but not its Pub/Sub
// connections.
type failoverClient struct {
	*redis.Client
	opt *redis.FailoverOptions
}

func (c *failoverClient) failoverOptions() *redis.FailoverOptions { return c.opt }
