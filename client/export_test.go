package client

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/presenced/presenced/protocol"
)

// Silence makes the live connection silent, as a client that hangs would
// be: it stops its app pings and sends the demo-mode silence frame, after
// which the server no longer counts its answers to pings.
func (c *Client) Silence(ctx context.Context) error {
	cn, err := c.waitLive(ctx)
	if err != nil {
		return err
	}
	cn.silenced.Store(true)
	return cn.send(ctx, protocol.Silence{})
}

// Held is how many data events wait for room in Events: more than 0 while
// the connection is live means the reader waits for the application.
func (c *Client) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// SetMinReadTimeout shortens how long a connection may bring nothing, for
// the rest of t; call it before Dial.
func SetMinReadTimeout(t testing.TB, d time.Duration) {
	old := minReadTimeout
	minReadTimeout = d
	t.Cleanup(func() { minReadTimeout = old })
}

// SetStableAfter shortens how long a connection must stay live for the
// backoff to start over, for the rest of t; call it before Dial.
func SetStableAfter(t testing.TB, d time.Duration) {
	old := stableAfter
	stableAfter = d
	t.Cleanup(func() { stableAfter = old })
}

var (
	TokenExpiry = tokenExpiry
	RefreshAt   = refreshAt
	Backoff     = backoff
)

// RecordIDs returns the users whose records c keeps, sorted.
func (c *Client) RecordIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.records))
}
