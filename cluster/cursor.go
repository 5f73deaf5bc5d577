package cluster

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
)

// A logPos is where a reader stands in one shard's log (T:log): the ID of
// the last entry it read, and how many entries the stream had added up to
// and with it (num: the entry's number, counting from 1; Redis counts them
// in XINFO STREAM's entries-added). The number is what tells an entry the
// reader read and that was trimmed since from one it never read: the
// stream keeps no ID of what it trimmed, only how many. A reader that
// starts at the oldest entry kept stands at 0-0 with the number of entries
// trimmed so far.
type logPos struct {
	logID
	num uint64
}

// less orders positions by their entry IDs, as Redis does.
func (p logPos) less(q logPos) bool { return q.after(p.logID) }

// parseEntryID reads an entry ID, ms-n, as Redis writes it.
func parseEntryID(s string) (logID, error) {
	id, ok := parseLogID(s)
	if !ok {
		return logID{}, fmt.Errorf("entry ID %q is not ms-n", s)
	}
	return id, nil
}

// A logCursor is what a cursor of Engine.Edges says: each shard's position
// and a hash of the shards' epochs (T:clock's epoch) as the cursor was made.
type logCursor struct {
	epochs uint64
	pos    []logPos // one per shard
}

// cursorVersion starts every cursor, so that a later format is told apart.
const cursorVersion = 1

// encode writes c as base64url of: the version, the shard count, the epoch
// hash (8 bytes), the greatest ms of the positions, then per shard that ms
// less the shard's, its n and its num, as uvarints. Shards' positions are
// near each other in time, so the differences stay short.
func (c logCursor) encode() string {
	var top uint64
	for _, p := range c.pos {
		top = max(top, p.ms)
	}
	b := make([]byte, 0, 16+len(c.pos)*8)
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(len(c.pos)))
	b = binary.BigEndian.AppendUint64(b, c.epochs)
	b = binary.AppendUvarint(b, top)
	for _, p := range c.pos {
		b = binary.AppendUvarint(b, top-p.ms)
		b = binary.AppendUvarint(b, p.n)
		b = binary.AppendUvarint(b, p.num)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// errCursorShape is a cursor that is not one encode writes.
var errCursorShape = errors.New("not a cursor of this log")

// errCursorShards is a cursor of a log with another number of shards.
var errCursorShards = errors.New("a cursor of a log with another number of shards")

// decodeCursor reads a cursor encode wrote for a log of shards shards. Any
// other string is an error, never a panic: a string encode would not write
// (trailing bytes, a long varint) is refused too, so one position has one
// cursor.
func decodeCursor(s string, shards int) (logCursor, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) == 0 || b[0] != cursorVersion {
		return logCursor{}, errCursorShape
	}
	r := cursorReader{b: b[1:]}
	n := r.uvarint()
	if r.bad || n != uint64(shards) {
		if r.bad || n == 0 || n > 4096 {
			return logCursor{}, errCursorShape
		}
		return logCursor{}, errCursorShards
	}
	if len(r.b) < 8 {
		return logCursor{}, errCursorShape
	}
	c := logCursor{epochs: binary.BigEndian.Uint64(r.b), pos: make([]logPos, shards)}
	r.b = r.b[8:]
	top := r.uvarint()
	for i := range c.pos {
		d, seq, num := r.uvarint(), r.uvarint(), r.uvarint()
		if r.bad || d > top {
			return logCursor{}, errCursorShape
		}
		c.pos[i] = logPos{logID{top - d, seq}, num}
	}
	if r.bad || len(r.b) != 0 || c.encode() != s {
		return logCursor{}, errCursorShape
	}
	return c, nil
}

// cursorReader reads uvarints off b; bad says one was missing or too long.
type cursorReader struct {
	b   []byte
	bad bool
}

func (r *cursorReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// epochHash hashes the shards' epochs, in shard order: a cursor names the
// lives of the shards' logs it was made in.
func epochHash(epochs []string) uint64 {
	h := fnv.New64a()
	for _, e := range epochs {
		_, _ = h.Write([]byte(strconv.Itoa(len(e))))
		_, _ = h.Write([]byte{':'})
		_, _ = h.Write([]byte(e))
	}
	return h.Sum64()
}
