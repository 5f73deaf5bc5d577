package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/internal/apicheck"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

// waitLong bounds every wait for something that must happen. It is seen at
// once normally; the bound only keeps a broken test from hanging, so it is
// generous enough for -race on a machine whose cores are all busy.
const waitLong = 20 * time.Second

// serverConfig says how a test server differs from the usual one.
type serverConfig struct {
	presence presence.Config // Slots, Tick, MemberList, TypingTTL, ...
	manual   bool            // the ring steps only when the test calls step
	auth     transport.Authenticator
	addr     string // "" for any loopback port
}

// server is a Hub on a presence Node of the test's own, so the test can
// step its clock and add members without sockets.
type server struct {
	t        *testing.T
	node     *presence.Node
	hub      *transport.Hub
	http     *http.Server
	addr     string
	upgrades atomic.Int64 // WebSocket handshakes asked for
	stopRun  context.CancelFunc
	runDone  chan struct{}
	stopOnce sync.Once
}

// realClock is a ring whose timeout (10 s) no test waits for, stepping
// every 20 ms so diffs come quickly.
func realClock() serverConfig {
	return serverConfig{presence: presence.Config{Slots: 501, Tick: 20 * time.Millisecond}}
}

func startServer(t *testing.T, cfg serverConfig) *server {
	t.Helper()
	node, err := presence.New(cfg.presence)
	require.NoError(t, err)
	hub, err := transport.New(transport.Config{Node: node, Auth: cfg.auth})
	require.NoError(t, err)
	addr := cfg.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	// The port of a server just stopped may linger a moment.
	require.Eventually(t, func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}, waitLong, 20*time.Millisecond, "listen on %s", addr)
	s := &server{t: t, node: node, hub: hub, addr: ln.Addr().String(), runDone: make(chan struct{})}
	var checks []apicheck.Option
	if _, own := cfg.auth.(transport.AuthenticatorFunc); own {
		checks = append(checks, apicheck.OwnAuth)
	}
	checked := apicheck.Handler(t, hub, checks...) // against docs/openapi.yaml
	s.http = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ws" {
				s.upgrades.Add(1)
			}
			checked.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: waitLong,
	}
	go s.http.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRun = cancel
	go func() {
		defer close(s.runDone)
		if !cfg.manual {
			node.Run(ctx)
		}
	}()
	t.Cleanup(s.stop)
	return s
}

// stop shuts the server down as on SIGTERM: its clients get close 1001.
func (s *server) stop() {
	s.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		assert.NoError(s.t, s.hub.Shutdown(ctx))
		assert.NoError(s.t, s.http.Close())
		s.stopRun()
		<-s.runDone
		s.node.Close()
	})
}

func (s *server) url() string { return "ws://" + s.addr + "/ws" }

// step moves the ring n steps, as n ticks of its clock would.
func (s *server) step(n int) {
	for range n {
		s.node.Step()
	}
}

// members returns the channel's members as the server has them.
func (s *server) members(t *testing.T, ch string) []string {
	t.Helper()
	_, members, err := s.hub.Members(context.Background(), ch, protocol.MaxPageLimit)
	require.NoError(t, err)
	return members
}

// member is a connection of the server's own, with no socket: the test
// joins and takes away members cheaply.
type member struct {
	node *presence.Node
	uid  string
}

func (*member) Send(protocol.Encoded) {}
func (*member) Probe()                {}
func (m *member) Close(int, string)   { m.node.Disconnect(m) }

// connect adds uid as a member of channels.
func (s *server) connect(t *testing.T, uid string, channels ...string) *member {
	t.Helper()
	m := &member{node: s.node, uid: uid}
	require.NoError(t, s.node.Connect(context.Background(), m, uid, channels))
	return m
}

func (s *server) disconnect(m *member) { s.node.Disconnect(m) }

// dialer is a WebSocket dialer whose connections the test can cut, and
// whose dials it can hold back.
type dialer struct {
	mu    sync.Mutex
	conns []net.Conn
	gate  chan struct{} // while not nil, dials wait for it to close
}

func (d *dialer) websocket() *websocket.Dialer {
	return &websocket.Dialer{
		HandshakeTimeout: waitLong,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d.mu.Lock()
			gate := d.gate
			d.mu.Unlock()
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				d.mu.Lock()
				d.conns = append(d.conns, c)
				d.mu.Unlock()
			}
			return c, err
		},
	}
}

// hold makes the next dials wait until release.
func (d *dialer) hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gate = make(chan struct{})
}

func (d *dialer) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
}

// cut breaks every connection made so far, as a network failure would.
func (d *dialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// fast are Options that reconnect quickly.
func fast(uid string, channels ...string) client.Options {
	return client.Options{UID: uid, Channels: channels, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
}

func dial(t *testing.T, s *server, opts client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	c, err := client.Dial(ctx, s.url(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

func ctxLong(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	return ctx
}

// eventually waits for cond, polling; msg says what was awaited.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, waitLong, 5*time.Millisecond, append([]any{msg}, args...)...)
}

// members returns what c holds of channel ch, for comparing.
func members(c *client.Client, ch string) string {
	return strings.Join(c.Channel(ch).Members, ",")
}

// nextState reads c's events until a StateChange in state want, and returns
// it.
func nextState(t *testing.T, c *client.Client, want client.ConnState) *client.StateChange {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case ev, ok := <-c.Events():
			require.True(t, ok, "events closed before state %s", want)
			if sc, ok := ev.(*client.StateChange); ok && sc.State == want {
				return sc
			}
		case <-timeout:
			t.Fatalf("no state %s within %s", want, waitLong)
		}
	}
}

// drain reads c's events until the channel is closed.
func drain(t *testing.T, c *client.Client) []protocol.Frame {
	t.Helper()
	var out []protocol.Frame
	timeout := time.After(waitLong)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("events not closed within %s", waitLong)
		}
	}
}

func closeErr(t *testing.T, err error) *client.CloseError {
	t.Helper()
	var ce *client.CloseError
	require.True(t, errors.As(err, &ce), "want a *client.CloseError, got %v", err)
	return ce
}

// closedPort returns a loopback address nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
