package presence

import (
	"context"
	"errors"
	"math"
	"time"
)

// ErrNoLog says that a Node's Engine keeps no log of edges: it is not an
// EdgeLog.
var ErrNoLog = errors.New("presence: the engine keeps no log of edges")

// The Node's reads of its engine's log (EdgeLog), for a server's API: the
// server side sees every edge as it is, as a webhook does.

func (n *Node) edgeLog() (EdgeLog, error) {
	l, ok := n.engine.(EdgeLog)
	if !ok {
		return nil, ErrNoLog
	}
	return l, nil
}

// Edges returns up to limit edges after the cursor after, as EdgeLog.Edges
// does; limit must be at least 1.
func (n *Node) Edges(ctx context.Context, after string, limit int) ([]Edge, string, error) {
	l, err := n.edgeLog()
	if err != nil {
		return nil, "", err
	}
	return l.Edges(ctx, after, max(limit, 1))
}

// UsersAt is Users with the cursor of the log the listing is exact at;
// the cursor is empty when the engine keeps no log.
func (n *Node) UsersAt(ctx context.Context, limit int) (count int, users []string, cursor string, err error) {
	l, err := n.edgeLog()
	if err != nil {
		count, users, err = n.Users(ctx, limit)
		return count, users, "", err
	}
	return l.UsersAt(ctx, limit)
}

// MembersAt is Members with the cursor of the log the page is exact at;
// the cursor is empty when the engine keeps no log.
func (n *Node) MembersAt(ctx context.Context, channel, after string, limit int) (count int, members []string, next, cursor string, err error) {
	l, err := n.edgeLog()
	if err != nil {
		count, members, next, err = n.Members(ctx, channel, after, limit)
		return count, members, next, "", err
	}
	if err := checkPage(channel, after, limit); err != nil {
		return 0, nil, "", "", err
	}
	// One more than asked says whether more follow.
	count, members, cursor, err = l.MembersAt(ctx, channel, after, min(limit, math.MaxInt32)+1)
	if err != nil {
		return 0, nil, "", "", err
	}
	members, next = cutPage(members, limit)
	return count, members, next, cursor, nil
}

// LogStats returns how many edges the engine's log keeps and when the
// oldest was made.
func (n *Node) LogStats(ctx context.Context) (length int, oldest time.Time, err error) {
	l, err := n.edgeLog()
	if err != nil {
		return 0, time.Time{}, err
	}
	return l.LogStats(ctx)
}
