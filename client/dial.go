package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// dial opens a WebSocket and reads its welcome. It returns as soon as ctx
// ends, whatever the server does: gorilla's handshake heeds a context's
// deadline but not its cancellation, so a server that accepts and then
// says nothing would otherwise hold Dial, and Close, for the whole
// handshake timeout.
func (c *Client) dial(ctx context.Context, token string) (*websocket.Conn, *protocol.Welcome, error) {
	u := *c.url
	if c.opts.UID != "" {
		q := u.Query()
		q.Set("uid", c.opts.UID)
		u.RawQuery = q.Encode()
	}
	h := c.opts.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	g := &dialGuard{}
	stop := context.AfterFunc(ctx, g.kill)
	defer stop()
	ws, resp, err := g.dialer(c.dialer).DialContext(ctx, u.String(), h)
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			return nil, nil, &CloseError{Status: resp.StatusCode, Reason: strings.TrimSpace(string(body))}
		}
		return nil, nil, fmt.Errorf("client: dial %s: %w", c.url.Redacted(), cmpOr(ctx.Err(), err))
	}
	ws.SetReadLimit(c.readLimit())
	_ = ws.SetReadDeadline(time.Now().Add(handshakeTimeout))
	_, data, err := ws.ReadMessage()
	if err != nil {
		ws.Close()
		return nil, nil, fmt.Errorf("client: read welcome: %w", cmpOr(ctx.Err(), err))
	}
	if !stop() {
		ws.Close()
		return nil, nil, fmt.Errorf("client: read welcome: %w", ctx.Err())
	}
	f, err := protocol.ParseServer(data)
	w, ok := f.(*protocol.Welcome)
	if err != nil || !ok {
		ws.Close()
		return nil, nil, fmt.Errorf("%w: want a welcome first, got %q (%v)", ErrProtocol, protocol.Truncate(string(data)), err)
	}
	return ws, w, nil
}

func (c *Client) readLimit() int64 {
	if c.opts.ReadLimit <= 0 {
		return DefaultReadLimit
	}
	return c.opts.ReadLimit
}

// serverTimeout is the welcome's timeout_ms as the Client uses it: 30 s
// when absent, else kept within bounds a real server's fits.
func serverTimeout(ms int64) time.Duration {
	if ms <= 0 {
		return 30 * time.Second
	}
	// In milliseconds first: a huge timeout_ms would overflow a Duration.
	ms = min(max(ms, minServerTimeout.Milliseconds()), maxServerTimeout.Milliseconds())
	return time.Duration(ms) * time.Millisecond
}

// dialGuard closes the network connection of a dial under way when kill
// is called, which unblocks the handshake and the read of the welcome.
type dialGuard struct {
	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

func (g *dialGuard) kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.killed = true
	for _, nc := range g.conns {
		nc.Close()
	}
}

// track keeps nc to close on kill, or closes it now if kill came first.
func (g *dialGuard) track(nc net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.killed {
		nc.Close()
		return
	}
	g.conns = append(g.conns, nc)
}

type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

func (g *dialGuard) wrap(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err == nil {
			g.track(nc)
		}
		return nc, err
	}
}

// dialer returns a copy of d whose connections g tracks, made the way d
// would make them (gorilla prefers NetDialContext to NetDial; through a
// proxy, the connection to the proxy is the one tracked).
func (g *dialGuard) dialer(d *websocket.Dialer) *websocket.Dialer {
	cp := *d
	base := d.NetDialContext
	if base == nil && d.NetDial != nil {
		nd := d.NetDial
		base = func(_ context.Context, network, addr string) (net.Conn, error) { return nd(network, addr) }
	}
	if base == nil {
		base = (&net.Dialer{}).DialContext
	}
	cp.NetDialContext = g.wrap(base)
	if d.NetDialTLSContext != nil {
		cp.NetDialTLSContext = g.wrap(d.NetDialTLSContext)
	}
	return &cp
}
