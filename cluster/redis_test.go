package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
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
	s := &redisServer{t: t, bin: bin, port: freePort(t), dir: t.TempDir(), extra: extra}
	s.start()
	t.Cleanup(s.kill)
	return s
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
	mu       sync.Mutex
	edges    []recorded // UserChanged, for the users the node follows
	produced []recorded // Produced: the edges this node made
	online   map[string]bool
	members  map[string][]string // channel -> its members now, as relayed
	joins    []string            // "channel uid +" or "channel uid -", in order
	chats    []string
	notify   chan struct{}
}

type recorded struct {
	uid string
	on  bool
	at  time.Time
}

func newRecorder() *recorder {
	return &recorder{notify: make(chan struct{}, 1), online: map[string]bool{}, members: map[string][]string{}}
}

// UserChanged records an edge when it changes the user's state, as a
// Node's view does: a snapshot of an offline user is no edge.
func (r *recorder) UserChanged(uid string, on bool) {
	r.mu.Lock()
	if r.online[uid] != on {
		r.online[uid] = on
		r.edges = append(r.edges, recorded{uid, on, time.Now()})
	}
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) Produced(uid string, on bool) {
	r.mu.Lock()
	r.produced = append(r.produced, recorded{uid, on, time.Now()})
	r.mu.Unlock()
	r.poke()
}

// MemberChanged records an edge when it changes the channel's members, as
// a Node's view does.
func (r *recorder) MemberChanged(channel, uid string, joined bool) {
	r.mu.Lock()
	if slices.Contains(r.members[channel], uid) == joined {
		r.mu.Unlock()
		return
	}
	ms := slices.DeleteFunc(r.members[channel], func(m string) bool { return m == uid })
	sign := "-"
	if joined {
		ms = append(ms, uid)
		sign = "+"
	}
	slices.Sort(ms)
	r.members[channel] = ms
	r.joins = append(r.joins, channel+" "+uid+" "+sign)
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) SetMembers(channel string, members []string) {
	r.mu.Lock()
	r.members[channel] = slices.Sorted(slices.Values(members))
	r.mu.Unlock()
	r.poke()
}

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
	return countOf(r.edges, uid, on)
}

// producedCount returns how many edges of uid in direction on this node made.
func (r *recorder) producedCount(uid string, on bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return countOf(r.produced, uid, on)
}

func countOf(edges []recorded, uid string, on bool) int {
	n := 0
	for _, e := range edges {
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

func (r *recorder) membersOf(channel string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.members[channel])
}

// joinEdges returns the member edges relayed for uid in channel, in order.
func (r *recorder) joinEdges(channel, uid string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, j := range r.joins {
		if strings.HasPrefix(j, channel+" "+uid+" ") {
			out = append(out, j[len(j)-1:])
		}
	}
	return out
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

// eventually waits until every assertion of check holds at once. Use it for
// what a test asserts, not for a different signal it expects to come first:
// an edge reaches a node over Pub/Sub before the node that made it has
// handled its script's reply, and one node's write may land before another's.
func eventually(t *testing.T, what string, check func(c *assert.CollectT)) {
	t.Helper()
	require.EventuallyWithT(t, check, testWait, 10*time.Millisecond, what)
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

// follow makes the node follow users (and channels "#name"), as a Node
// does for its clients, and waits until each one's state is in.
func (n *node) follow(t *testing.T, names ...string) {
	t.Helper()
	var topics []presence.Topic
	for _, name := range names {
		if ch, ok := strings.CutPrefix(name, "#"); ok {
			topics = append(topics, presence.Topic{Channel: ch})
		} else {
			topics = append(topics, presence.Topic{UID: name})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	require.NoError(t, n.Follow(ctx, topics), "follow on %s", n.Node())
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

// aliveExpiry returns when node's liveness in shard expires (ms, Redis
// clock), or 0 if it has none there.
func aliveExpiry(t *testing.T, c redis.UniversalClient, k shardKeys, node string) int64 {
	t.Helper()
	score, err := c.ZScore(context.Background(), k.alive, node).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return int64(score)
}
