package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/presenced/presenced/protocol"
)

// ErrNotExact is returned by LoadMembers when a big channel's count-only
// diffs kept interrupting its passes, so the list loaded may be stale.
var ErrNotExact = errors.New("client: the channel changed while its members were loading (count-only diffs)")

// passes is how many passes LoadMembers makes before it gives up on a
// channel whose count-only diffs interrupt them.
const passes = 3

// LoadMembers pages through every member of channel ch, a channel the
// Client joined, while applying the diffs that come meanwhile, so that
// Channel(ch) then holds the exact member set (Complete). The Client loads
// the channel again after each reconnect, until Leave. A channel above the
// server's -presence-lists sends diffs without lists: its list stays exact
// until the next such diff, which makes it stale (not Complete) again.
// A page that breaks the paging rules (see the package documentation)
// ends it with ErrProtocol and is not applied.
func (c *Client) LoadMembers(ctx context.Context, ch string) error {
	if err := c.loadMembers(ctx, ch); err != nil {
		return fmt.Errorf("client: load members of %s: %w", ch, err)
	}
	return nil
}

func (c *Client) loadMembers(ctx context.Context, ch string) error {
	limit := c.opts.PageLimit
	if limit <= 0 || limit > protocol.MaxPageLimit {
		limit = protocol.MaxPageLimit
	}
	for range passes {
		var exact bool
		err := c.retry(ctx, func(cn *conn) error {
			c.mu.Lock()
			_, joined := c.joined[ch]
			st := c.channels[ch]
			c.mu.Unlock()
			// After a reconnect every joined channel has its new snapshot
			// before the Client is live; a Join in flight has none yet.
			if !joined || st == nil || st.gen != cn.gen {
				return fmt.Errorf("channel %q not joined", protocol.Truncate(ch))
			}
			c.mu.Lock()
			startCountOnly := st.countOnly
			c.mu.Unlock()
			after := ""
			for {
				f, err := cn.call(ctx, protocol.Members{Channel: ch, After: after, Limit: limit},
					&request{kind: "members", channel: ch, after: after, limit: limit})
				if err != nil {
					return err
				}
				page := f.(*protocol.MembersPage)
				if page.Next == "" {
					break
				}
				after = page.Next
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if st.countOnly == startCountOnly {
				st.stale = false
				exact = true
				c.loaded[ch] = struct{}{}
			}
			return nil
		})
		if err != nil || exact {
			return err
		}
	}
	return ErrNotExact
}
