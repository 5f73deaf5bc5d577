package presence

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// An EdgeLog is an Engine that gives every edge it produces a place in one
// log, in the same step as the change that made it, and keeps the edges a
// while, so that a backend that missed some (its webhook receiver was down)
// reads them again from where it stopped, and a snapshot says from where to
// read. Both engines of this module are EdgeLogs.
//
// A cursor is an opaque string naming a place in the log: the edges before
// it have been read. Each user's and each channel's edges are read in the
// order they were made; an engine that keeps its log in parts (a Redis
// Stream per shard) orders edges of different parts by its clock only.
type EdgeLog interface {
	// Edges returns up to limit edges after the cursor after ("": from the
	// oldest kept), in order, each with its ID, and the cursor to read on
	// with: after itself when no edge is newer. A cursor whose next edges
	// the log no longer keeps, or one it cannot vouch for (the store lost
	// edges since, or the cursor is not one of its own), is a *CursorError.
	Edges(ctx context.Context, after string, limit int) (edges []Edge, next string, err error)
	// UsersAt is Store.Users with the cursor the listing is exact at: the
	// listing holds every edge before the cursor and none after it.
	UsersAt(ctx context.Context, limit int) (count int, users []string, cursor string, err error)
	// MembersAt is Store.Members with the cursor the listing is exact at.
	MembersAt(ctx context.Context, channel, after string, limit int) (count int, members []string, cursor string, err error)
	// LogStats returns how many edges the log keeps and when the oldest of
	// them was made (zero when it keeps none).
	LogStats(ctx context.Context) (length int, oldest time.Time, err error)
}

// Defaults of a LogConfig's zero fields.
const (
	DefaultLogKeep = time.Hour
	DefaultLogMax  = 1_000_000
)

// LogConfig bounds what an EdgeLog keeps: an edge goes once it is older than
// Keep, or once Max newer ones are kept (a store that trims in blocks, as
// Redis Streams do, may keep a few more a while).
type LogConfig struct {
	Keep time.Duration // 0 means DefaultLogKeep
	Max  int           // 0 means DefaultLogMax
}

// WithDefaults checks c and returns it with its zero fields set to their
// defaults.
func (c LogConfig) WithDefaults() (LogConfig, error) {
	if c.Keep < 0 {
		return c, fmt.Errorf("presence: negative log Keep %v", c.Keep)
	}
	if c.Max < 0 {
		return c, fmt.Errorf("presence: negative log Max %d", c.Max)
	}
	if c.Keep == 0 {
		c.Keep = DefaultLogKeep
	}
	if c.Max == 0 {
		c.Max = DefaultLogMax
	}
	return c, nil
}

// ErrCursorGone is what a *CursorError is (errors.Is).
var ErrCursorGone = errors.New("presence: the log cannot answer from this cursor")

// A CursorError says that an EdgeLog cannot answer from a cursor: the edges
// after it are no longer kept, or the log cannot vouch for them. A backend
// then takes a snapshot (UsersAt, MembersAt) and reads on from its cursor.
type CursorError struct {
	Cursor string
	// Oldest is the oldest cursor the log still answers from.
	Oldest string
	// Lost is true when the log lost edges it had (a store restarted
	// empty, a failover that lost writes) or never made the cursor; false
	// when they were trimmed as LogConfig asks.
	Lost bool
}

func (e *CursorError) Error() string {
	if e.Lost {
		return "the log cannot vouch for the edges after this cursor (it lost edges since, or the cursor is not its own)"
	}
	return "the edges after this cursor are no longer kept"
}

// Is makes errors.Is(err, ErrCursorGone) true.
func (e *CursorError) Is(target error) bool { return target == ErrCursorGone }
