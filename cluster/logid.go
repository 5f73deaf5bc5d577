package cluster

import (
	"strconv"
	"strings"
	"sync"
)

// A logID is a log entry's ID, "<ms>-<n>", as Redis orders them.
type logID struct{ ms, n uint64 }

func parseLogID(s string) (logID, bool) {
	ms, n, ok := strings.Cut(s, "-")
	if !ok {
		return logID{}, false
	}
	a, err1 := strconv.ParseUint(ms, 10, 64)
	b, err2 := strconv.ParseUint(n, 10, 64)
	return logID{a, b}, err1 == nil && err2 == nil
}

func (id logID) after(o logID) bool { return id.ms > o.ms || (id.ms == o.ms && id.n > o.n) }

func (id logID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.n, 10)
}

// A logClock is a node's side of the log's Lamport clock (see withClock in
// lua/prelude_write.lua): the highest log ID the node has heard. A call that
// makes edges carries it and answers its shard's, so an edge made after a
// call that answered has the higher ID, in whatever shard.
type logClock struct {
	mu sync.Mutex
	id logID
}

func (c *logClock) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id.String()
}

// heard raises the clock to id, if it is a log ID.
func (c *logClock) heard(id string) {
	v, ok := parseLogID(id)
	if !ok {
		return
	}
	c.mu.Lock()
	if v.after(c.id) {
		c.id = v
	}
	c.mu.Unlock()
}
