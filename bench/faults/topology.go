package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/presenced/presenced/bench/internal/child"
)

// startCluster starts a Redis Cluster of three masters with a replica each,
// built by redis-cli --cluster create, and returns the nodes' -redis.
func (w *world) startCluster(ctx context.Context) (string, error) {
	var addrs []string
	for i := range 6 {
		name := fmt.Sprintf("redis-%d", i)
		// The bus port is set: port+10000, the default, may be taken or
		// past 65535.
		bus, err := child.FreePort()
		if err != nil {
			return "", err
		}
		_, busPort, _ := net.SplitHostPort(bus)
		p, err := child.StartRedis(name, w.redisServer, "", w.logPath(name), "--cluster-enabled", "yes",
			"--cluster-port", busPort, "--cluster-config-file", name+".conf", "--cluster-node-timeout", "2000")
		if err != nil {
			return "", err
		}
		w.extra = append(w.extra, p)
		addrs = append(addrs, p.Addr)
	}
	create := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "1", "--cluster-yes")
	if _, err := w.cli(ctx, create...); err != nil {
		return "", err
	}
	for _, a := range addrs {
		if err := waitUntil(ctx, 30*time.Second, func() bool {
			info, err := doString(ctx, a, "CLUSTER", "INFO")
			return err == nil && strings.Contains(info, "cluster_state:ok")
		}); err != nil {
			return "", fmt.Errorf("cluster state of %s never ok: %w", a, err)
		}
	}
	return "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2], nil
}

// clusterNode is a line of CLUSTER NODES.
type clusterNode struct {
	id, addr, masterID string
	master             bool
}

// clusterNodes reads, from each server, its own line of CLUSTER NODES:
// what a server says of itself is current, another's view may lag behind
// a failover. Sorted by address.
func (w *world) clusterNodes(ctx context.Context) ([]clusterNode, error) {
	var ns []clusterNode
	var errs []error
	for _, p := range w.extra {
		out, err := doString(ctx, p.Addr, "CLUSTER", "NODES")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for line := range strings.Lines(out) {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.Contains(f[2], "myself") {
				continue
			}
			ns = append(ns, clusterNode{id: f[0], addr: p.Addr, masterID: f[3], master: strings.Contains(f[2], "master")})
		}
	}
	if len(ns) == 0 {
		return nil, errors.Join(append(errs, errors.New("no cluster server answers"))...)
	}
	slices.SortFunc(ns, func(a, b clusterNode) int { return strings.Compare(a.addr, b.addr) })
	return ns, nil
}

func masters(ns []clusterNode) []clusterNode {
	return slices.DeleteFunc(slices.Clone(ns), func(n clusterNode) bool { return !n.master })
}

// clusterFailover has a replica of the pick-th master take over with
// CLUSTER FAILOVER, and waits until it says it is a master.
func (w *world) clusterFailover(ctx context.Context, pick int) (string, error) {
	ns, err := w.clusterNodes(ctx)
	if err != nil {
		return "", err
	}
	ms := masters(ns)
	if len(ms) == 0 {
		return "", errors.New("no master")
	}
	m := ms[pick%len(ms)]
	i := slices.IndexFunc(ns, func(n clusterNode) bool { return !n.master && n.masterID == m.id })
	if i < 0 {
		return "", fmt.Errorf("master %s has no replica", m.addr)
	}
	r := ns[i]
	if _, err := child.Do(ctx, r.addr, "CLUSTER", "FAILOVER"); err != nil {
		return "", err
	}
	note := fmt.Sprintf("replica %s takes over from %s", r.addr, m.addr)
	return note, waitUntil(ctx, 20*time.Second, func() bool {
		out, err := doString(ctx, r.addr, "ROLE")
		return err == nil && out == "master"
	})
}

// migrateSlot moves the slot of a key of the pick-th master to the next
// master, the way redis-cli's reshard does: IMPORTING, MIGRATING, MIGRATE
// of its keys, then the new owner on every master.
func (w *world) migrateSlot(ctx context.Context, pick int) (string, error) {
	ns, err := w.clusterNodes(ctx)
	if err != nil {
		return "", err
	}
	ms := masters(ns)
	if len(ms) < 2 {
		return "", errors.New("fewer than two masters")
	}
	src, dst := ms[pick%len(ms)], ms[(pick+1)%len(ms)]
	key, err := child.Do(ctx, src.addr, "RANDOMKEY")
	if err != nil {
		return "", err
	}
	k, ok := key.(string)
	if !ok {
		return "", fmt.Errorf("master %s holds no key", src.addr)
	}
	slot, err := child.Do(ctx, src.addr, "CLUSTER", "KEYSLOT", k)
	if err != nil {
		return "", err
	}
	s := fmt.Sprint(slot)
	if _, err := child.Do(ctx, dst.addr, "CLUSTER", "SETSLOT", s, "IMPORTING", src.id); err != nil {
		return "", err
	}
	if _, err := child.Do(ctx, src.addr, "CLUSTER", "SETSLOT", s, "MIGRATING", dst.id); err != nil {
		// Leave no slot half moved: the harness's error, not the cluster's.
		_, undo := child.Do(ctx, dst.addr, "CLUSTER", "SETSLOT", s, "STABLE")
		return "", errors.Join(err, undo)
	}
	host, port, _ := net.SplitHostPort(dst.addr)
	moved := 0
	for {
		v, err := child.Do(ctx, src.addr, "CLUSTER", "GETKEYSINSLOT", s, "100")
		if err != nil {
			return "", err
		}
		keys, _ := v.([]any)
		if len(keys) == 0 {
			break
		}
		args := []string{"MIGRATE", host, port, "", "0", "5000", "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, fmt.Sprint(k))
		}
		if _, err := child.Do(ctx, src.addr, args...); err != nil {
			return "", err
		}
		moved += len(keys)
	}
	for _, m := range append([]clusterNode{dst, src}, ms...) {
		if _, err := child.Do(ctx, m.addr, "CLUSTER", "SETSLOT", s, "NODE", dst.id); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("slot %s (%d keys) from %s to %s", s, moved, src.addr, dst.addr), nil
}

// startSentinel starts a master, its replica and a Sentinel that fails the
// master over a second after it stops answering, and returns the nodes'
// -redis.
func (w *world) startSentinel() (string, error) {
	m, err := child.StartRedis("redis-a", w.redisServer, "", w.logPath("redis-a"))
	if err != nil {
		return "", err
	}
	w.extra = append(w.extra, m)
	_, mport, _ := net.SplitHostPort(m.Addr)
	r, err := child.StartRedis("redis-b", w.redisServer, "", w.logPath("redis-b"), "--replicaof", "127.0.0.1", mport)
	if err != nil {
		return "", err
	}
	w.extra = append(w.extra, r)
	addr, err := child.FreePort()
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	conf, err := w.writeFile("sentinel.conf", fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor m 127.0.0.1 %s 1\nsentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 3000\n",
		port, w.dir, mport))
	if err != nil {
		return "", err
	}
	s, err := child.Start("sentinel", w.redisServer, []string{conf, "--sentinel"}, w.logPath("sentinel"))
	if err != nil {
		return "", err
	}
	s.Addr = addr
	w.extra = append(w.extra, s)
	if err := s.WaitRedis(10 * time.Second); err != nil {
		return "", err
	}
	w.master = "m"
	ctx := context.Background()
	if err := waitUntil(ctx, 30*time.Second, func() bool { return replicaSynced(ctx, r.Addr) }); err != nil {
		return "", fmt.Errorf("replica never in sync: %w", err)
	}
	return "redis://" + addr + "?master_name=m", nil
}

func replicaSynced(ctx context.Context, addr string) bool {
	info, err := doString(ctx, addr, "INFO", "replication")
	return err == nil && strings.Contains(info, "master_link_status:up")
}

// sentinelFailover has the Sentinel fail the master over, waits for the
// new master, then for the old one to be in sync as its replica.
func (w *world) sentinelFailover(ctx context.Context) (string, error) {
	s := w.extra[len(w.extra)-1].Addr
	masterOf := func() string {
		v, err := child.Do(ctx, s, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", w.master)
		a, _ := v.([]any)
		if err != nil || len(a) != 2 {
			return ""
		}
		return net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1]))
	}
	old := masterOf()
	if _, err := child.Do(ctx, s, "SENTINEL", "FAILOVER", w.master); err != nil {
		return "", err
	}
	var now string
	if err := waitUntil(ctx, 20*time.Second, func() bool { now = masterOf(); return now != "" && now != old }); err != nil {
		return "", fmt.Errorf("no new master: %w", err)
	}
	note := fmt.Sprintf("master %s -> %s", old, now)
	return note, waitUntil(ctx, 30*time.Second, func() bool { return replicaSynced(ctx, old) })
}

// doString is child.Do for a command whose reply is a string; ROLE gives
// its first element.
func doString(ctx context.Context, addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := child.Do(ctx, addr, args...)
	if err != nil {
		return "", err
	}
	if a, ok := v.([]any); ok && len(a) > 0 {
		v = a[0]
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%v: reply %v, want a string", args, v)
	}
	return s, nil
}

// waitUntil polls cond every 50 ms until it holds, ctx ends or d passes.
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
