package cluster

import (
	"container/heap"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/presenced/presenced/presence"
)

var _ presence.EdgeLog = (*Engine)(nil)

const (
	// maxEdgesPage bounds a page of Edges.
	maxEdgesPage = 1000
	// logSettle is how old an entry must be, by Redis's clock as the read
	// starts, for Edges to hand it on: a write under way in one shard
	// cannot then be overtaken by the entry it comes before in another.
	logSettle = time.Second
	// edgeRounds bounds the reads of one page: a shard that had more than
	// its share of the page is read again, while the page is short.
	edgeRounds = 4
)

// Edges returns up to limit edges after the cursor after ("": from the
// oldest kept) in the log's order, each entry's ID compared as (ms, n,
// shard), and the cursor after them. It reads every shard in one pipeline
// (and then the shards that had more, while the page is short), hands on
// only entries older than logSettle by Redis's clock, and stops where a
// shard stopped being read. A limit above 1000 is 1000; one of 0 only
// checks the cursor. A cursor the log cannot answer from is a
// *presence.CursorError.
func (e *Engine) Edges(ctx context.Context, after string, limit int) ([]presence.Edge, string, error) {
	limit = max(min(limit, maxEdgesPage), 0)
	r := &logRead{e: e, shards: make([]shardRead, len(e.keys))}
	var cur logCursor
	if after != "" {
		c, err := decodeCursor(after, len(e.keys))
		if err != nil {
			logs, rerr := e.readLogs(ctx, nil, 0, 0)
			if rerr != nil {
				return nil, "", rerr
			}
			return nil, "", e.cursorGone(after, logs, true)
		}
		cur = c
	}
	share := min(limit, max(8, (5*limit/4+len(e.keys)-1)/len(e.keys)))
	var from []*logPos
	if after != "" {
		from = make([]*logPos, len(e.keys))
		for i := range from {
			from[i] = &cur.pos[i]
		}
	}
	logs, err := e.readLogs(ctx, from, share, 0)
	if err != nil {
		return nil, "", err
	}
	epochs := make([]string, len(logs))
	r.frontier = int64(-1)
	for i, l := range logs {
		epochs[i] = l.epoch
		if r.frontier < 0 || l.now < r.frontier {
			r.frontier = l.now
		}
	}
	r.frontier -= logSettle.Milliseconds()
	r.epochs = epochHash(epochs)
	if after != "" && r.epochs != cur.epochs {
		return nil, "", e.cursorGone(after, logs, true)
	}
	gone, lost := false, false
	for i := range logs {
		p := logPos{num: logs[i].added - logs[i].length}
		if after != "" {
			p = cur.pos[i]
			switch logs[i].check(p) {
			case posLost:
				gone, lost = true, true
			case posTrimmed:
				gone = true
			}
		}
		r.shards[i] = shardRead{pos: p, read: p}
		r.shards[i].take(logs[i].entries, share, r.frontier)
	}
	if gone {
		return nil, "", e.cursorGone(after, logs, lost)
	}
	page := r.merge(ctx, limit)
	next := logCursor{epochs: r.epochs, pos: make([]logPos, len(r.shards))}
	for i, s := range r.shards {
		next.pos[i] = s.pos
	}
	if len(page) == 0 && after != "" {
		return page, after, nil
	}
	return page, next.encode(), nil
}

// A logRead is one call of Edges under way.
type logRead struct {
	e        *Engine
	frontier int64  // ms: entries at or above it wait for a later call
	epochs   uint64 // the hash of the shards' epochs
	shards   []shardRead
}

// A shardRead is what a logRead has of one shard: its position in the
// page so far, the entries read past it, and whether there may be more
// before the frontier than were read.
type shardRead struct {
	pos  logPos      // the last entry in the page, or where the cursor was
	read logPos      // the last entry read
	buf  []edgeEntry // read, not yet in the page
	full bool
}

// take adds entries read after s.read, asked for count of them, keeping
// those below frontier: a shard that gave count of them, all below it,
// may have more.
func (s *shardRead) take(entries []edgeEntry, count int, frontier int64) {
	s.full = count > 0 && len(entries) == count
	for _, en := range entries {
		if int64(en.pos.ms) >= frontier {
			s.full = false
			break
		}
		s.read = logPos{en.pos.logID, s.read.num + 1}
		en.pos.num = s.read.num
		s.buf = append(s.buf, en)
	}
}

// merge makes the page: the shards' entries in order, (ms, n, shard), up
// to limit of them and no further than the least last entry read of a
// full shard, whose next entries are not read yet. While the page is
// short of limit it reads the full shards on, their share being what the
// page lacks.
func (r *logRead) merge(ctx context.Context, limit int) []presence.Edge {
	page := []presence.Edge{}
	for round := 0; ; round++ {
		cut, capped := logKey{}, false
		for i, s := range r.shards {
			if k := (logKey{s.read.ms, s.read.n, i}); s.full && (!capped || k.less(cut)) {
				cut, capped = k, true
			}
		}
		h := &logHeap{}
		for i, s := range r.shards {
			if len(s.buf) > 0 {
				h.keys = append(h.keys, logKey{s.buf[0].pos.ms, s.buf[0].pos.n, i})
			}
		}
		heap.Init(h)
		for h.Len() > 0 && len(page) < limit {
			k := h.keys[0]
			if capped && cut.less(k) {
				break
			}
			s := &r.shards[k.shard]
			en := s.buf[0]
			s.buf = s.buf[1:]
			s.pos = en.pos
			page = append(page, en.edge)
			if len(s.buf) > 0 {
				h.keys[0] = logKey{s.buf[0].pos.ms, s.buf[0].pos.n, k.shard}
				heap.Fix(h, 0)
			} else {
				heap.Pop(h)
			}
		}
		if len(page) >= limit || !capped || round == edgeRounds-1 || !r.readOn(ctx, limit-len(page)) {
			return page
		}
	}
}

// readOn reads the full shards on after what was read of them, up to
// count entries each. It reports false if it could not (Redis failed, or a
// shard's log changed under the read): the page ends where it is, and the
// next call finds out.
func (r *logRead) readOn(ctx context.Context, count int) bool {
	from := make([]*logPos, len(r.shards))
	for i := range r.shards {
		if r.shards[i].full {
			from[i] = &r.shards[i].read
		}
	}
	logs, err := r.e.readLogs(ctx, from, count, r.frontier)
	if err != nil {
		return false
	}
	for i := range r.shards {
		if from[i] == nil {
			continue
		}
		if logs[i].check(r.shards[i].read) != posOK {
			return false
		}
		r.shards[i].take(logs[i].entries, count, r.frontier)
	}
	return true
}

// A logKey orders entries of the shards' logs: (ms, n, shard).
type logKey struct {
	ms, seq uint64
	shard   int
}

func (k logKey) less(o logKey) bool {
	if k.ms != o.ms {
		return k.ms < o.ms
	}
	if k.seq != o.seq {
		return k.seq < o.seq
	}
	return k.shard < o.shard
}

// logHeap is the shards' next entries, least first.
type logHeap struct{ keys []logKey }

func (h *logHeap) Len() int           { return len(h.keys) }
func (h *logHeap) Less(i, j int) bool { return h.keys[i].less(h.keys[j]) }
func (h *logHeap) Swap(i, j int)      { h.keys[i], h.keys[j] = h.keys[j], h.keys[i] }
func (h *logHeap) Push(x any)         { h.keys = append(h.keys, x.(logKey)) }
func (h *logHeap) Pop() any {
	k := h.keys[len(h.keys)-1]
	h.keys = h.keys[:len(h.keys)-1]
	return k
}

// cursorGone is the error of a cursor the log cannot answer from, with
// the oldest cursor it answers from now: every shard at its first entry
// kept, in the epochs read.
func (e *Engine) cursorGone(after string, logs []shardLog, lost bool) error {
	oldest := logCursor{pos: make([]logPos, len(logs))}
	epochs := make([]string, len(logs))
	for i, l := range logs {
		epochs[i] = l.epoch
		oldest.pos[i] = logPos{num: l.added - l.length}
	}
	oldest.epochs = epochHash(epochs)
	return &presence.CursorError{Cursor: after, Oldest: oldest.encode(), Lost: lost}
}

// readLogs runs log.lua on the shards: those with a position in from (nil:
// every shard, from its first entry), up to count entries each, below
// frontier (0: each shard's Redis time less logSettle). A shard not read
// has a zero shardLog.
func (e *Engine) readLogs(ctx context.Context, from []*logPos, count int, frontier int64) ([]shardLog, error) {
	var calls []scriptRun
	var shards []int
	front := ""
	if frontier > 0 {
		front = strconv.FormatInt(frontier, 10)
	}
	for i, k := range e.keys {
		start := ""
		if from != nil {
			if from[i] == nil {
				continue
			}
			if from[i].logID != (logID{}) {
				start = from[i].String()
			}
		}
		calls = append(calls, scriptRun{logScript, k.keys, []any{start, count, front, logSettle.Milliseconds()}})
		shards = append(shards, i)
	}
	cmds := runScripts(ctx, e.rdb, calls)
	logs := make([]shardLog, len(e.keys))
	for j, cmd := range cmds {
		i := shards[j]
		vals, err := scriptResult(cmd, 8)
		if err != nil {
			e.health.fail("log", err)
			return nil, fmt.Errorf("cluster: read the log of edges of shard %d: %w", i, err)
		}
		if logs[i], err = e.parseShardLog(i, vals); err != nil {
			return nil, fmt.Errorf("cluster: read the log of edges of shard %d: %w", i, err)
		}
	}
	e.health.ok()
	return logs, nil
}
