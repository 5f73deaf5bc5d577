package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// Client is a connection to a presenced server that reconnects by itself
// and keeps the presence state the server reports. Create one with Dial
// and release it with Close.
type Client struct {
	url    *url.URL
	opts   Options
	log    *slog.Logger
	dialer *websocket.Dialer

	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	runDone chan struct{}
	reloads sync.WaitGroup // LoadMembers after a reconnect
	dropped atomic.Uint64
	chatRef atomic.Int64

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when live, state or stopped change
	live     *conn         // the connection calls use; nil while not live
	state    ConnState
	gen      uint64 // connections made so far
	stopped  bool
	err      error // why it stopped
	lastErr  error // why the last attempt failed, for Dial's error
	token    string
	joined   set                   // the channels the Client is to be in
	channels map[string]*chanState // what it knows of them
	loaded   set                   // channels LoadMembers completed: loaded again after a reconnect
	watch    []string              // the watch list
	users    map[string]UserState  // what it knows of the watched users
	away     bool                  // the activity it set
	self     string                // its user, from the last welcome
	records  map[string]Record     // the records of the users it sees (record.go)
	events   chan protocol.Frame
	held     []protocol.Frame // data events waiting for room in events, in order (deliver.go)
}

// Dial connects to the server's WebSocket at url (ws:// or wss://, such as
// "wss://chat.example.com/ws"; http:// and https:// are taken as ws:// and
// wss://) and returns once the connection is live: the welcome came, and
// the snapshot of every channel of opts.Channels. While the server cannot
// be reached it keeps trying, with backoff, until ctx ends; it fails at
// once on a bad URL, a refused handshake (HTTP 400, 401 without a new
// token from RefreshToken, 403, 404) or a refused channel.
func Dial(ctx context.Context, rawURL string, opts Options) (*Client, error) {
	u, err := wsURL(rawURL)
	if err != nil {
		return nil, err
	}
	for _, ch := range opts.Channels {
		if !protocol.ValidChannel(ch) {
			return nil, fmt.Errorf("client: channel %q: %w", protocol.Truncate(ch), protocol.ErrInvalidChannel)
		}
	}
	c := &Client{
		url:      u,
		opts:     opts,
		log:      opts.Logger,
		dialer:   opts.Dialer,
		runDone:  make(chan struct{}),
		changed:  make(chan struct{}),
		state:    Connecting,
		token:    opts.Token,
		joined:   setOf(opts.Channels),
		channels: map[string]*chanState{},
		loaded:   set{},
		users:    map[string]UserState{},
		records:  map[string]Record{},
		events:   make(chan protocol.Frame, cmpOr(opts.EventBuffer, defaultEventBuffer)),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.dialer == nil {
		c.dialer = &websocket.Dialer{HandshakeTimeout: handshakeTimeout, Proxy: websocket.DefaultDialer.Proxy}
	}
	c.opts.MinBackoff = cmpOr(opts.MinBackoff, defaultMinBackoff)
	c.opts.MaxBackoff = max(cmpOr(opts.MaxBackoff, defaultMaxBackoff), c.opts.MinBackoff)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	ready := make(chan error, 1)
	go c.run(ready)
	select {
	case err := <-ready:
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.mu.Lock()
		last := c.lastErr
		c.mu.Unlock()
		c.Close()
		if last != nil {
			return nil, fmt.Errorf("client: dial %s: %w (last attempt: %w)", u.Redacted(), ctx.Err(), last)
		}
		return nil, fmt.Errorf("client: dial %s: %w", u.Redacted(), ctx.Err())
	}
}

func wsURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("client: bad URL: %w", err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return nil, fmt.Errorf("client: bad URL %q: the scheme must be ws, wss, http or https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("client: bad URL %q: no host", u.Redacted())
	}
	return u, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Close closes the connection (with a normal close frame) and stops the
// Client: calls waiting for it return ErrClosed, and Events is closed.
// Close may be called more than once; it returns nil.
func (c *Client) Close() error {
	c.cancel()
	<-c.runDone
	c.reloads.Wait()
	return nil
}

// Events returns the channel of the frames the server sent, as the types of
// package protocol (*protocol.Joined, *protocol.Presence,
// *protocol.TypingUsers, *protocol.Watching, *protocol.Status,
// *protocol.Chat, *protocol.Publish, *protocol.Message,
// *protocol.MembersPage, *protocol.Left, *protocol.Welcome,
// *protocol.Error, ...; pongs are left out), and the Client's own
// *StateChange, in the order they came. Each comes after the state it
// changed was updated; a frame the Client ignored (see "A server that
// misbehaves" in the package documentation) does not come. The channel is
// closed when the Client stops.
//
// Data events are never dropped: *protocol.Chat, *protocol.Publish,
// *protocol.Message, and a *protocol.Error whose Ref is set (a chat of
// this Client's that was not delivered). When the buffer
// (Options.EventBuffer) is full, the Client stops reading the connection
// until the application takes an event, so the server sees a slow reader:
// its send queue fills, and past its limit it closes the connection (1008,
// slow consumer) and the Client reconnects. Meanwhile the state is as of
// the last frame read, and calls awaiting an answer (Join, Leave, Watch,
// LoadMembers) wait too, as far as their contexts let them.
//
// Every other event is a notice of state that Channel, User and Record
// keep exact: a notice that finds the buffer full, or a data event waiting
// for room, is dropped (see Dropped). The snapshots, diffs and status
// frames carry the records of the users they list (Users) and the changed
// ones (Updated), normalized as Record gives them (mode "online" as "",
// info compact); a status frame is cut to the watched users, its records
// too.
func (c *Client) Events() <-chan protocol.Frame { return c.events }

// Dropped is how many notices were dropped because the Events buffer was
// full, or a data event was waiting for room in it. Data events are never
// dropped.
func (c *Client) Dropped() uint64 { return c.dropped.Load() }

// State returns the connection's state now.
func (c *Client) State() ConnState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Err returns why the Client stopped: ErrClosed after Close, a
// *CloseError when the server ended it for good; nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Channel returns what the Client knows of channel ch: the zero
// ChannelState for a channel it has not joined.
func (c *Client) Channel(ch string) ChannelState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.channels[ch]
	if st == nil {
		return ChannelState{}
	}
	return st.export()
}

// User returns what the Client knows of uid, a user on its watch list; the
// zero UserState for another.
func (c *Client) User(uid string) UserState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.users[uid]
}

// setStateLocked records and announces a connection state.
func (c *Client) setStateLocked(ev *StateChange) {
	c.state = ev.State
	c.emitLocked(ev)
	c.broadcastLocked()
}

func (c *Client) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// stop stops the Client for good with err.
func (c *Client) stop(err error, code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.setStateLocked(&StateChange{State: Closed, Code: code, Err: err})
	c.stopped, c.err, c.live, c.held = true, err, nil, nil
	close(c.events)
}

// waitLive returns the live connection, waiting for one until ctx ends or
// the Client stops.
func (c *Client) waitLive(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		if c.stopped {
			err := c.err
			c.mu.Unlock()
			return nil, err
		}
		if c.live != nil {
			cn := c.live
			c.mu.Unlock()
			return cn, nil
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// retry runs do on the live connection, again on the next one as long as
// the connection it ran on was lost, until ctx ends or the Client stops.
func (c *Client) retry(ctx context.Context, do func(cn *conn) error) error {
	for {
		cn, err := c.waitLive(ctx)
		if err != nil {
			return err
		}
		if err := do(cn); !errors.Is(err, errConnLost) {
			return err
		}
		// Not live until run has seen the loss: wait for that, not spin.
		select {
		case <-cn.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
