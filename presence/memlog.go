package presence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/protocol"
)

// memLog is the memory engine's log of edges: every edge numbered from 1 in
// the order made, the newest kept as LogConfig says. Its cursor is
// "<epoch>-<n>", n the number of the last edge read (0: none), and an
// edge's ID "evt_<epoch>_<n>". The epoch is drawn when the engine is made,
// so a cursor of another process (one that restarted) is told apart rather
// than read against edges it never saw. The engine's lock guards it.
type memLog struct {
	cfg   LogConfig
	epoch string
	// The kept edges, oldest first, in blocks of logBlock entries, the
	// oldest at blocks[0][head]: the log grows and shrinks a block at a
	// time, never copying what it keeps, nor holding twice what it needs
	// as a doubled slice would.
	blocks [][]logEntry
	head   int
	n      int    // entries kept
	first  uint64 // the number of the oldest kept; last+1 when none is
	last   uint64 // the number of the newest edge made
}

// logBlock is the entries of one block of a memLog.
const logBlock = 1024

// at returns the i-th kept entry, from the oldest.
func (l *memLog) at(i int) *logEntry {
	i += l.head
	return &l.blocks[i/logBlock][i%logBlock]
}

// A logEntry is an edge as the log keeps it: 56 bytes rather than an
// Edge's 128, as a busy hour keeps an entry or two per connection (its
// online and joins), which the memory per connection would show. The ID is
// the entry's number, and the record is kept only for an update.
type logEntry struct {
	kind    EdgeKind
	uid     string
	channel string
	at      int64 // Unix nanoseconds
	record  *protocol.Record
}

func (l *memLog) edge(i int) Edge {
	en := l.at(i)
	e := Edge{Kind: en.kind, UID: en.uid, Channel: en.channel, At: time.Unix(0, en.at), ID: l.id(l.first + uint64(i))}
	if en.record != nil {
		e.Record = *en.record
	}
	return e
}

func (l *memLog) id(n uint64) string { return "evt_" + l.epoch + "_" + strconv.FormatUint(n, 10) }

func newMemLog(cfg LogConfig) *memLog {
	b := make([]byte, 8)
	rand.Read(b)
	return &memLog{cfg: cfg, epoch: hex.EncodeToString(b), first: 1}
}

// add numbers e, keeps it and returns it with its ID.
func (l *memLog) add(e Edge) Edge {
	l.last++
	e.ID = l.id(l.last)
	en := logEntry{kind: e.Kind, uid: e.UID, channel: e.Channel, at: e.At.UnixNano()}
	if e.Kind == EdgeUpdate {
		rec := e.Record
		en.record = &rec
	}
	if end := l.head + l.n; end == len(l.blocks)*logBlock {
		l.blocks = append(l.blocks, make([]logEntry, logBlock))
	}
	l.n++
	*l.at(l.n - 1) = en
	l.trim(e.At)
	return e
}

// trim drops the edges past Max and those older than Keep at now, and
// the blocks they leave empty.
func (l *memLog) trim(now time.Time) {
	drop := max(0, l.n-l.cfg.Max)
	cutoff := now.Add(-l.cfg.Keep).UnixNano()
	for drop < l.n && l.at(drop).at < cutoff {
		drop++
	}
	for range drop {
		*l.at(0) = logEntry{} // let its strings go
		l.head++
		l.n--
		l.first++
		if l.head == logBlock {
			l.blocks[0] = nil
			l.blocks = l.blocks[1:]
			l.head = 0
		}
	}
	if l.n == 0 && len(l.blocks) > 0 {
		l.blocks, l.head = nil, 0
	}
}

// cursor names the place after the newest edge.
func (l *memLog) cursor() string { return l.cursorAt(l.last) }

func (l *memLog) cursorAt(n uint64) string { return l.epoch + "-" + strconv.FormatUint(n, 10) }

// read returns up to limit edges after the cursor after ("": from the
// oldest kept) and the cursor after them.
func (l *memLog) read(after string, limit int, now time.Time) ([]Edge, string, error) {
	l.trim(now)
	from := l.first - 1
	if after != "" {
		epoch, num, ok := strings.Cut(after, "-")
		n, err := strconv.ParseUint(num, 10, 64)
		switch {
		case !ok || err != nil || epoch != l.epoch || n > l.last:
			return nil, "", &CursorError{Cursor: after, Oldest: l.cursorAt(l.first - 1), Lost: true}
		case n < l.first-1:
			return nil, "", &CursorError{Cursor: after, Oldest: l.cursorAt(l.first - 1)}
		}
		from = n
	}
	i := int(from - (l.first - 1)) // the i-th kept is the first after the cursor
	end := min(l.n, i+max(limit, 0))
	out := make([]Edge, 0, end-i)
	for j := i; j < end; j++ {
		out = append(out, l.edge(j))
	}
	return out, l.cursorAt(from + uint64(len(out))), nil
}

// stats returns how many edges are kept and when the oldest was made.
func (l *memLog) stats(now time.Time) (int, time.Time) {
	l.trim(now)
	if l.n == 0 {
		return 0, time.Time{}
	}
	return l.n, time.Unix(0, l.at(0).at)
}

// The memory engine's EdgeLog.

func (e *memoryEngine) Edges(ctx context.Context, after string, limit int) ([]Edge, string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log.read(after, limit, time.Now())
}

func (e *memoryEngine) UsersAt(ctx context.Context, limit int) (int, []string, string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.online.Len(), e.online.First(limit), e.log.cursor(), nil
}

func (e *memoryEngine) MembersAt(ctx context.Context, channel, after string, limit int) (int, []string, string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cursor := e.log.cursor()
	members := e.channels[channel]
	if members == nil {
		return 0, []string{}, cursor, nil
	}
	return members.Len(), members.After(after, limit), cursor, nil
}

func (e *memoryEngine) LogStats(ctx context.Context) (int, time.Time, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n, oldest := e.log.stats(time.Now())
	return n, oldest, nil
}

var _ EdgeLog = (*memoryEngine)(nil)
