package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// redisServer is a real redis-server on a free loopback port, without
// persistence, so a restart comes back empty.
type redisServer struct {
	t     testing.TB
	bin   string
	port  int
	dir   string
	extra []string
	cmd   *exec.Cmd
	done  chan struct{}
}

// startRedis starts a redis-server for the test; it skips when the binary is
// missing, unless CI is set.
func startRedis(t testing.TB, extra ...string) *redisServer {
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
func freePort(t testing.TB) int {
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
	resume(s.cmd.Process) // a frozen process dies only once resumed
	<-s.done
	s.cmd = nil
}

// restart brings the server back, empty, on the same port.
func (s *redisServer) restart() {
	s.kill()
	s.start()
}

func (s *redisServer) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 2 * time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// node is an Engine running against a test Redis with its recorder.
// connsOf is uid's connections on all nodes, as s has them.
func connsOf(ctx context.Context, s presence.Store, uid string) (int, error) {
	st, err := s.Status(ctx, uid)
	return st.Conns, err
}

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
	return startNodeRelay(t, cfg, nil)
}

// startNodeRelay is startNode with the recorder wrapped in a Relay of the
// test's own (nil: the recorder itself).
func startNodeRelay(t *testing.T, cfg Config, wrap func(*Engine, *recorder) presence.Relay) *node {
	t.Helper()
	e, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{Engine: e, rec: newRecorder(), cancel: cancel, runErr: make(chan error, 1)}
	var relay presence.Relay = n.rec
	if wrap != nil {
		relay = wrap(e, n.rec)
	}
	e.Attach(relay)
	go func() { n.runErr <- e.Run(ctx) }()
	t.Cleanup(func() {
		n.crash()
		n.stopRun()
	})
	select {
	case <-e.health.reading:
	case <-time.After(10 * time.Second):
		t.Fatalf("node %s did not start reading", cfg.Node)
	}
	return n
}

// SetUser, SetMember, SetInfo and SetRecord apply one change as a Node
// would: the tests' shorthand for Apply.
func (n *node) SetUser(uid string, conns, away int) {
	n.Apply(presence.Change{Kind: presence.ChangeUser, UID: uid, N: conns, Away: away})
}

func (n *node) SetMember(channel, uid string, conns int, away bool) {
	c := presence.Change{Kind: presence.ChangeMember, Channel: channel, UID: uid, N: conns}
	if away {
		c.Away = 1
	}
	n.Apply(c)
}

func (n *node) SetInfo(uid string, info json.RawMessage) {
	n.Apply(presence.Change{Kind: presence.ChangeInfo, UID: uid, Info: info})
}

func (n *node) SetRecord(uid string, set protocol.Set) {
	n.Apply(presence.Change{Kind: presence.ChangeSet, UID: uid, Set: set})
}

// follow makes the node follow users (and channels "#name"), as a Node
// does for its clients, and waits until each one's state is in.
func (n *node) follow(t *testing.T, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	require.NoError(t, n.Follow(ctx, topics(names...)), "follow on %s", n.Node())
}

// topics names users, and channels as "#name".
func topics(names ...string) []presence.Topic {
	var ts []presence.Topic
	for _, name := range names {
		if ch, ok := strings.CutPrefix(name, "#"); ok {
			ts = append(ts, presence.Topic{Channel: ch})
		} else {
			ts = append(ts, presence.Topic{UID: name})
		}
	}
	return ts
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
// Swallowed, it drops every connection too, but accepts new ones and never
// answers on them, like a Redis host that is still reachable and hung.
// Muted, it drops what clients send on the connections it has, as a broken
// network path would before the connection breaks. Stalled, it holds what
// either side sends and delivers it when the stall ends, even from a client
// that gave up and closed meanwhile, as a congested link does.
type proxy struct {
	l         net.Listener
	target    string
	mu        sync.Mutex
	stalls    *sync.Cond // on mu: signalled when a stall ends
	isCut     bool
	swallowed bool
	muted     bool
	stalled   bool
	// stallAfter starts a stall once a client sent it (and it went on):
	// Redis runs that command, and its reply is held.
	stallAfter string
	// black holds the connections whose bytes, both ways, are thrown away
	// for good (blackholeOpen); new ones are not.
	black map[net.Conn]bool
	conns map[net.Conn]struct{}
	sent  map[net.Conn][]byte // what each client sent, forwarded or not
}

func startProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{l: l, target: target, conns: map[net.Conn]struct{}{}, sent: map[net.Conn][]byte{}}
	p.stalls = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() {
		_ = l.Close()
		p.cut(true)
	})
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

// client is a Redis client through p, closed when the test ends.
func (p *proxy) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: 1,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut, swallowed, target := p.isCut, p.swallowed, p.target
		if swallowed {
			p.conns[c] = struct{}{} // read nothing, answer nothing, until released
		}
		p.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		if swallowed {
			continue
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn, upward bool) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				p.mu.Lock()
				if n > 0 && upward {
					p.sent[src] = append(p.sent[src], buf[:n]...)
				}
				for p.stalled {
					p.stalls.Wait()
				}
				if upward && p.stallAfter != "" && strings.Contains(string(buf[:n]), p.stallAfter) {
					p.stalled, p.stallAfter = true, "" // from the next bytes on
				}
				muted := upward && p.muted || p.black[src] || p.black[dst]
				p.mu.Unlock()
				if n > 0 && !muted {
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
		go pipe(up, c, true)
		go pipe(c, up, false)
	}
}

// saw reports whether a client sent s through the proxy: once it has,
// s is in Redis's socket, or dropped if muted.
func (p *proxy) saw(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.sent {
		if strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}

func (p *proxy) cut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = on
	if on {
		p.stalled = false // what a stall held is thrown away with the connections
		p.stalls.Broadcast()
		p.dropLocked()
	}
}

// stall starts holding what either side sends, or ends it, delivering what
// was held.
func (p *proxy) stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled, p.stallAfter = on, ""
	p.stalls.Broadcast()
}

// blackholeOpen throws away, both ways and for good, what goes over the
// connections open now, as a path that lost them does without a reset;
// new connections get through.
func (p *proxy) blackholeOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.black = map[net.Conn]bool{}
	for c := range p.conns {
		p.black[c] = true
	}
}

// stallAfterSent stalls once a client sent s, right after s goes on.
func (p *proxy) stallAfterSent(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallAfter = s
}

// swallow starts or ends swallowing; either way it drops every connection.
func (p *proxy) swallow(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.swallowed = on
	p.dropLocked()
}

// mute starts dropping what clients send, or ends it by dropping every
// connection.
func (p *proxy) mute(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.muted = on
	if !on {
		p.dropLocked()
	}
}

// retarget sends new connections to target from now on, and drops every
// connection to the old one, as a client that follows a failover does.
func (p *proxy) retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	p.dropLocked()
}

func (p *proxy) dropLocked() {
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
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
