package cluster

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// watchSentinels listens, until ctx ends, to every Sentinel of opt for the
// announcement of a new master of opt.MasterName, and then has every
// subscription made again: the Sentinels already name the new master, so
// the new connections dial it. Each Sentinel announces the same switch; it
// is acted on once.
func (r *router) watchSentinels(ctx context.Context, opt *redis.FailoverOptions) {
	switches := make(chan string, 16)
	var wg sync.WaitGroup
	for _, addr := range opt.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: opt.SentinelUsername,
			Password: opt.SentinelPassword, TLSConfig: opt.TLSConfig, Dialer: opt.Dialer,
			DialTimeout: opt.DialTimeout, ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout})
		ps := sc.Subscribe(ctx, "+switch-master")
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sc.Close()
			defer ps.Close()
			in := ps.Channel()
			for {
				select {
				case <-ctx.Done():
					return
				case m, ok := <-in:
					if !ok {
						return
					}
					// <master name> <old ip> <old port> <new ip> <new port>
					f := strings.Fields(m.Payload)
					if len(f) == 5 && f[0] == opt.MasterName {
						select {
						case switches <- net.JoinHostPort(f[3], f[4]):
						case <-ctx.Done():
							return
						}
					}
				}
			}
		}()
	}
	defer wg.Wait()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case addr := <-switches:
			if addr == last {
				continue
			}
			last = addr
			r.log.Warn("cluster: sentinel switched to a new master; making every subscription again", "master", opt.MasterName, "addr", addr)
			r.remakeAll(errors.New("cluster: sentinel switched master to " + addr))
		}
	}
}
