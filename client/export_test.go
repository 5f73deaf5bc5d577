package client

import (
	"context"

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

var (
	TokenExpiry = tokenExpiry
	RefreshAt   = refreshAt
	Backoff     = backoff
)
