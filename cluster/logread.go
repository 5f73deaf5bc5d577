package cluster

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/presenced/presenced/presence"
)

// A shardLog is what log.lua read of one shard's log.
type shardLog struct {
	now      int64 // Redis's time, ms
	epoch    string
	last     logID  // last-generated ID
	added    uint64 // entries added ever
	length   uint64 // entries kept
	first    logID  // the first entry kept, if hasFirst
	hasFirst bool
	maxDel   logID // max-deleted ID: of entries deleted one by one (XDEL)
	there    bool  // the entry read from is kept
	entries  []edgeEntry
}

// An edgeEntry is an entry of a shard's log read back as its edge.
type edgeEntry struct {
	pos  logPos // num is set once it is taken into a shardRead
	edge presence.Edge
}

// How a shard's log stands to a position in it.
const (
	posOK      = iota
	posTrimmed // entries after it were trimmed
	posLost    // the log does not have what was read up to it
)

// check says whether l can answer from p: what p read is there (or was
// trimmed, all of it, and no more), and nothing after p was trimmed.
// Entries up to p were n of the stream's; the stream counts those it
// added and those it keeps, and it keeps its last ones.
func (l *shardLog) check(p logPos) int {
	removed := l.added - l.length
	switch {
	case p.after(l.last) || p.num > l.added:
		return posLost // a position the log never had
	case l.maxDel.after(p.logID):
		return posTrimmed
	case l.hasFirst && !l.first.after(p.logID):
		// p is among the entries kept: it is there, and so is everything
		// before it, or the log is not the one p was read from.
		if !l.there || p.num <= removed {
			return posLost
		}
		return posOK
	case p.num < removed:
		return posTrimmed // entries after p are gone with those before
	case p.num > removed:
		return posLost
	}
	return posOK
}

// parseShardLog reads log.lua's reply for shard.
func (e *Engine) parseShardLog(shard int, vals []any) (shardLog, error) {
	var l shardLog
	var err error
	now, _ := vals[0].(int64)
	l.now = now
	l.epoch, _ = vals[1].(string)
	last, _ := vals[2].(string)
	if l.last, err = parseEntryID(last); err != nil {
		return l, fmt.Errorf("last-generated-id: %w", err)
	}
	added, _ := vals[3].(int64)
	length, _ := vals[4].(int64)
	if added < length || length < 0 {
		return l, fmt.Errorf("the log added %d entries and keeps %d", added, length)
	}
	l.added, l.length = uint64(added), uint64(length)
	if first, _ := vals[5].(string); first != "" {
		if l.first, err = parseEntryID(first); err != nil {
			return l, fmt.Errorf("first entry: %w", err)
		}
		l.hasFirst = true
	}
	maxDel, _ := vals[6].(string)
	if l.maxDel, err = parseEntryID(maxDel); err != nil {
		return l, fmt.Errorf("max-deleted-entry-id: %w", err)
	}
	l.there = flag(vals[7])
	prefix := "evt_" + e.cfg.Prefix + "_" + strconv.Itoa(shard) + "_"
	for _, v := range vals[8:] {
		en, err := parseLogEntry(v, prefix)
		if err != nil {
			return l, err
		}
		l.entries = append(l.entries, en)
	}
	return l, nil
}

// parseLogEntry reads an entry, {id, {field, value, ...}}, as its edge,
// whose ID is prefix and the entry's.
func parseLogEntry(v any, prefix string) (edgeEntry, error) {
	arr, _ := v.([]any)
	if len(arr) != 2 {
		return edgeEntry{}, fmt.Errorf("log entry %v is not {id, fields}", v)
	}
	id, _ := arr[0].(string)
	pos, err := parseEntryID(id)
	if err != nil {
		return edgeEntry{}, err
	}
	fields, _ := arr[1].([]any)
	en := edgeEntry{pos: logPos{logID: pos}, edge: presence.Edge{ID: prefix + id}}
	var kind, at, record string
	for i := 0; i+1 < len(fields); i += 2 {
		f, _ := fields[i].(string)
		val, _ := fields[i+1].(string)
		switch f {
		case "k":
			kind = val
		case "u":
			en.edge.UID = val
		case "c":
			en.edge.Channel = val
		case "t":
			at = val
		case "r":
			record = val
		}
	}
	en.edge.Kind = edgeKinds[kind] // the scripts' names, as in their replies
	if kind == presence.EdgeUpdate.String() {
		en.edge.Kind = presence.EdgeUpdate
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		// A number Lua wrote in its own way, 1.764e+12.
		f, ferr := strconv.ParseFloat(at, 64)
		ms, err = int64(f), ferr
	}
	if en.edge.Kind == 0 || en.edge.UID == "" || err != nil {
		return edgeEntry{}, fmt.Errorf("log entry %s: kind %q, uid %q, time %q", id, kind, en.edge.UID, at)
	}
	en.edge.At = time.UnixMilli(ms)
	if en.edge.Kind == presence.EdgeUpdate && record != "" {
		if err := json.Unmarshal([]byte(record), &en.edge.Record); err != nil {
			return edgeEntry{}, fmt.Errorf("log entry %s: record: %w", id, err)
		}
	}
	return en, nil
}
