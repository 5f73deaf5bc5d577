package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// redisServer is a real redis-server on a free loopback port, without
// persistence, so a restart comes back empty.
type redisServer struct {
	t     *testing.T
	bin   string
	port  int
	dir   string
	extra []string
	cmd   *exec.Cmd
	done  chan struct{}
}

// startRedis starts a redis-server for the test; it skips when the binary is
// missing, unless CI is set.
func startRedis(t *testing.T, extra ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not found and CI is set: install it (apt-get install redis-server): %v", err)
		}
		t.Skip("redis-server not found; install it (apt-get install redis-server) to run the cluster tests")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s := &redisServer{t: t, bin: bin, port: port, dir: t.TempDir(), extra: extra}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start() {
	s.t.Helper()
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", s.dir, "--loglevel", "warning"}, s.extra...)
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Dir = s.dir
	require.NoError(s.t, s.cmd.Start())
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := s.ping(); err == nil {
			return
		} else if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer: %v", s.addr(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping speaks RESP by hand so the helper does not depend on the code under test.
func (s *redisServer) ping() error {
	c, err := net.DialTimeout("tcp", s.addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// kill SIGKILLs the server and waits for it to exit.
func (s *redisServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a frozen process dies only once resumed
	<-s.done
	s.cmd = nil
}

// freeze stops (SIGSTOP) or resumes (SIGCONT) the server: a stalled Redis
// that keeps its data and its connections.
func (s *redisServer) freeze(on bool) {
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	require.NoError(s.t, s.cmd.Process.Signal(sig))
}

// restart brings the server back, empty, on the same port.
func (s *redisServer) restart() {
	s.kill()
	s.start()
}

func (s *redisServer) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 2 * time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// recorder is the Relay of a test node: it keeps everything delivered to it.
type recorder struct {
	mu     sync.Mutex
	edges  []recorded
	chats  []string
	notify chan struct{}
}

type recorded struct {
	uid string
	on  bool
	at  time.Time
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) UserChanged(uid string, on, here bool) {
	r.mu.Lock()
	r.edges = append(r.edges, recorded{uid, on, time.Now()})
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) MemberChanged(channel, uid string, joined bool) {}

func (r *recorder) Deliver(m presence.Message) {
	r.mu.Lock()
	r.chats = append(r.chats, string(m.Frame))
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// count returns how many edges of uid in direction on were delivered.
func (r *recorder) count(uid string, on bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.edges {
		if e.uid == uid && e.on == on {
			n++
		}
	}
	return n
}

func (r *recorder) edgeTime(uid string, on bool) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.edges {
		if e.uid == uid && e.on == on {
			return e.at
		}
	}
	return time.Time{}
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.edges...)
}

// waitFor waits, on deliveries rather than a fixed sleep, until cond holds.
func (r *recorder) waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond) // conditions that depend on Redis, not deliveries
	defer tick.Stop()
	for !cond() {
		select {
		case <-r.notify:
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
	}
}

// node is an Engine running against a test Redis with its recorder.
type node struct {
	*Engine
	rec    *recorder
	cancel context.CancelFunc
	runErr chan error
}

const (
	// A live node's renewal may run 800 ms late before its lease expires:
	// room for a loaded machine.
	testTimeout = 1200 * time.Millisecond
	// testWait bounds waits for what must happen eventually; generous, so a
	// loaded machine under -race does not fail them. Latencies are logged.
	testWait  = 10 * time.Second
	testRenew = 400 * time.Millisecond
	testClaim = 200 * time.Millisecond
)

func testConfig(c redis.UniversalClient, name string) Config {
	return Config{Client: c, Node: name, Prefix: "t", Shards: 4, Timeout: testTimeout,
		RenewEvery: testRenew, ClaimEvery: testClaim}
}

// startNode starts an engine and its Run loop, and waits until it reads events.
func startNode(t *testing.T, cfg Config) *node {
	t.Helper()
	e, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{Engine: e, rec: newRecorder(), cancel: cancel, runErr: make(chan error, 1)}
	go func() { n.runErr <- e.Run(ctx, n.rec) }()
	t.Cleanup(func() {
		n.crash()
		n.stopRun()
	})
	select {
	case <-e.ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("node %s did not start reading", cfg.Node)
	}
	return n
}

// stopRun ends the Run loop and waits for it.
func (n *node) stopRun() {
	n.cancel()
	if n.runErr != nil {
		<-n.runErr
		n.runErr = nil
	}
}

// proxy forwards TCP to a target until cut: then it drops every connection and
// refuses new ones, like a network partition between one node and Redis.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	isCut  bool
	conns  map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = l.Close()
		p.cut(true)
	})
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.isCut
		p.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

func (p *proxy) cut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = on
	if on {
		for c := range p.conns {
			_ = c.Close()
		}
		p.conns = map[net.Conn]struct{}{}
	}
}

// streamEntry is one entry of a shard's events stream.
type streamEntry struct {
	edgeEvent
	by string // the node that wrote it, "claim:<node>" for an expired lease
	at int64  // ms on Redis's clock, from the stream ID
}

// streamEntries returns the entries of a shard's events stream, in order.
func streamEntries(t *testing.T, c redis.UniversalClient, k shardKeys) []streamEntry {
	t.Helper()
	msgs, err := c.XRange(context.Background(), k.events, "-", "+").Result()
	require.NoError(t, err)
	var out []streamEntry
	for _, m := range msgs {
		at, err := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64)
		require.NoError(t, err, "stream ID %s", m.ID)
		uid, _ := m.Values["u"].(string)
		by, _ := m.Values["by"].(string)
		out = append(out, streamEntry{edgeEvent{uid: uid, on: m.Values["on"] == "1"}, by, at})
	}
	return out
}

// offlineBy returns who wrote each offline edge of uid, over every shard.
func offlineBy(t *testing.T, c redis.UniversalClient, prefix string, shards int, uid string) []string {
	t.Helper()
	var by []string
	for shard := range shards {
		for _, e := range streamEntries(t, c, newShardKeys(prefix, shard)) {
			if e.uid == uid && !e.on {
				by = append(by, e.by)
			}
		}
	}
	return by
}

// leaseExpiries returns the expiry (ms, Redis clock) of each lease node holds.
func leaseExpiries(t *testing.T, c redis.UniversalClient, prefix string, shards int, node string) map[string]int64 {
	t.Helper()
	leases := map[string]int64{}
	for shard := range shards {
		zs, err := c.ZRangeWithScores(context.Background(), newShardKeys(prefix, shard).leases, 0, -1).Result()
		require.NoError(t, err)
		for _, z := range zs {
			if uid, ok := strings.CutPrefix(z.Member.(string), node+"|"); ok {
				leases[uid] = int64(z.Score)
			}
		}
	}
	return leases
}
