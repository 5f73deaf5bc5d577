package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// run connects, reconnects and refreshes the token until the Client stops.
// ready gets the outcome of the first connection: nil once live, or the
// error that stopped the Client before.
func (c *Client) run(ready chan<- error) {
	defer close(c.runDone)
	attempt := 0          // since the last stable connection
	triedRefresh := false // since the last live connection
	for {
		lived, err := c.session(ready == nil, func() {
			if ready != nil {
				ready <- nil
				ready = nil
			}
		})
		if c.ctx.Err() != nil {
			c.stop(ErrClosed, 0)
			return
		}
		wasLive := lived >= 0
		// Only a connection that lasted starts the backoff over: one that
		// a server drops as soon as it is live (or after a welcome) must
		// not let the Client come back at the shortest wait forever.
		stable := lived >= stableAfter
		if stable {
			attempt = 0
		}
		if wasLive {
			triedRefresh = false
		}
		code := closeCode(err)
		final, now := false, false
		switch {
		case code == protocol.CloseTokenExpired || httpStatus(err) == http.StatusUnauthorized:
			if c.opts.RefreshToken != nil && !triedRefresh {
				triedRefresh = true
				now = c.newToken() // at once: the old token was the trouble
			}
			final = !now
		case code == protocol.CloseDisconnected:
			final = true
		case httpStatus(err) == http.StatusBadRequest || httpStatus(err) == http.StatusForbidden || httpStatus(err) == http.StatusNotFound:
			final = true
		case ready != nil && isServerError(err):
			final = true // a channel of Options.Channels was refused
		}
		if final {
			c.stop(err, code)
			if ready != nil {
				ready <- err
			}
			return
		}
		var delay time.Duration
		// A new token is worth trying at once, unless the connection it
		// replaces died young: then a server that closes with 4401 as soon
		// as it is live would get a reconnect, and RefreshToken a call,
		// in a tight loop.
		if !now || (wasLive && !stable) {
			delay = backoff(attempt, c.opts.MinBackoff, c.opts.MaxBackoff)
			attempt++
		}
		c.mu.Lock()
		c.lastErr = err
		c.setStateLocked(&StateChange{State: Waiting, Code: code, Err: err, Delay: delay})
		c.mu.Unlock()
		c.log.Debug("client: reconnecting", "err", err, "delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			c.stop(ErrClosed, 0)
			return
		}
	}
}

func closeCode(err error) int {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		return ce.Code
	}
	if ce, ok := errors.AsType[*CloseError](err); ok {
		return ce.Code
	}
	return 0
}

func httpStatus(err error) int {
	if ce, ok := errors.AsType[*CloseError](err); ok {
		return ce.Status
	}
	return 0
}

func isServerError(err error) bool {
	_, ok := errors.AsType[*ServerError](err)
	return ok
}

// session makes one connection and serves it until it ends. It reports
// how long the connection was live (from onLive to its end; -1 if it never
// was) and why it ended; a server's close comes as a *CloseError.
func (c *Client) session(again bool, onLive func()) (lived time.Duration, err error) {
	c.mu.Lock()
	token := c.token
	if again {
		c.setStateLocked(&StateChange{State: Connecting})
	}
	c.mu.Unlock()
	ws, welcome, err := c.dial(c.ctx, token)
	if err != nil {
		return -1, err
	}
	cn := c.start(ws, welcome)
	defer cn.wait()
	if err := c.resync(cn, !again); err != nil {
		cn.end(err)
		return -1, err
	}
	c.mu.Lock()
	if !cn.ended {
		c.live = cn
		c.setStateLocked(&StateChange{State: Live})
	}
	held := len(c.held) > 0
	reload := sorted(c.loaded)
	c.mu.Unlock()
	liveAt := time.Now()
	onLive()
	if held {
		// The reader hands over the data events held while the joins went
		// on when it next reads a frame: a ping brings one at once.
		_ = cn.sendRaw(c.ctx, pingFrame)
	}
	for _, ch := range reload {
		c.reloads.Go(func() {
			if err := c.LoadMembers(c.ctx, ch); err != nil {
				c.log.Debug("client: load members after reconnect", "channel", ch, "err", err)
			}
		})
	}
	err = c.serve(cn)
	return time.Since(liveAt), err
}

// serve waits for cn to end, refreshing the token before it expires.
func (c *Client) serve(cn *conn) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	arm := func(at time.Time) {
		if !at.IsZero() {
			timer.Reset(time.Until(at))
		}
	}
	arm(c.nextRefresh(time.Time{}))
	for {
		select {
		case <-cn.done:
			return closeErr(cn.err)
		case <-c.ctx.Done():
			cn.shutdown()
			return ErrClosed
		case <-timer.C:
			if err := c.refresh(cn); err != nil {
				c.log.Warn("client: token refresh failed", "err", err)
			}
			arm(c.nextRefresh(time.Now()))
		}
	}
}

// closeErr turns a close from the server into a *CloseError.
func closeErr(err error) error {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		return &CloseError{Code: ce.Code, Reason: ce.Text}
	}
	return err
}

// nextRefresh is when to refresh the current token next: zero for never.
// After a refresh at last it is never sooner than a moment later, so a
// token that does not move exp forward is not asked for in a loop.
func (c *Client) nextRefresh(last time.Time) time.Time {
	if c.opts.RefreshToken == nil {
		return time.Time{}
	}
	c.mu.Lock()
	token := c.token
	c.mu.Unlock()
	exp, ok := tokenExpiry(token)
	if !ok {
		return time.Time{}
	}
	now := time.Now()
	at := refreshAt(now, exp)
	if !last.IsZero() {
		retry := min(max(exp.Sub(now)/4, 100*time.Millisecond), 10*time.Second)
		at = later(at, last.Add(retry))
	}
	return at
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// refresh asks for a newer token and sends it to the server.
func (c *Client) refresh(cn *conn) error {
	ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
	defer cancel()
	token, err := c.opts.RefreshToken(ctx)
	if err != nil {
		return fmt.Errorf("client: refresh token: %w", err)
	}
	if token == "" {
		return errors.New("client: refresh token: RefreshToken returned no token")
	}
	c.mu.Lock()
	c.token = token
	c.mu.Unlock()
	if err := cn.send(ctx, protocol.Refresh{Token: token}); err != nil {
		return fmt.Errorf("client: send refreshed token: %w", err)
	}
	return nil
}

// newToken asks RefreshToken for a token after the server refused the
// current one, and reports whether it gave one.
func (c *Client) newToken() bool {
	ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
	defer cancel()
	token, err := c.opts.RefreshToken(ctx)
	if err != nil || token == "" {
		c.log.Warn("client: no new token after the server refused one", "err", err)
		return false
	}
	c.mu.Lock()
	c.token = token
	c.mu.Unlock()
	return true
}

// resync joins every channel again on a new connection, sends the watch
// list and the away state, and waits for the answers, whose snapshots
// replace the state held. A channel the server refuses is dropped, or on
// the first connection fails it.
func (c *Client) resync(cn *conn, first bool) error {
	c.mu.Lock()
	channels := sorted(c.joined)
	watch := slices.Clone(c.watch)
	away := c.away
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, cn.readTimeout())
	defer cancel()
	joins := make([]*request, len(channels))
	for i, ch := range channels {
		joins[i] = &request{kind: "joined", channel: ch}
		if err := cn.ask(ctx, protocol.Join{Channel: ch}, joins[i]); err != nil {
			return fmt.Errorf("client: join %s: %w", ch, err)
		}
	}
	var w *request
	if len(watch) > 0 {
		w = &request{kind: "watching", uids: watch}
		if err := cn.ask(ctx, protocol.Watch{UIDs: watch}, w); err != nil {
			return fmt.Errorf("client: watch: %w", err)
		}
	}
	if away {
		if err := cn.send(ctx, protocol.Activity{State: "away"}); err != nil {
			return fmt.Errorf("client: set activity: %w", err)
		}
	}
	for i, r := range joins {
		_, err := cn.await(ctx, r)
		if isServerError(err) && !first {
			c.log.Warn("client: channel refused on reconnect; dropped", "channel", channels[i], "err", err)
			c.mu.Lock()
			c.dropChannelLocked(channels[i])
			delete(c.joined, channels[i])
			delete(c.loaded, channels[i])
			c.mu.Unlock()
			continue
		}
		if err != nil {
			return fmt.Errorf("client: join %s: %w", channels[i], err)
		}
	}
	if w != nil {
		if _, err := cn.await(ctx, w); err != nil && !isServerError(err) {
			return fmt.Errorf("client: watch: %w", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.channels { // left while the Client was away
		if _, ok := c.joined[ch]; !ok {
			c.dropChannelLocked(ch)
		}
	}
	if len(c.watch) == 0 {
		old := c.users
		c.users = map[string]UserState{}
		c.forgetLocked(maps.Keys(old), nil)
	}
	return nil
}

// dropChannelLocked forgets channel ch's state, and the records of those
// of its members the Client no longer sees.
func (c *Client) dropChannelLocked(ch string) {
	if st := c.channels[ch]; st != nil {
		delete(c.channels, ch)
		c.forgetLocked(maps.Keys(st.members), nil)
	}
}
