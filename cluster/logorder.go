package cluster

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/presenced/presenced/presence"
)

// The order of the log across shards. Each shard's log is a stream whose
// entries are in the order its calls ran; across shards a reader merges
// them by (ms, n, shard) of their IDs. That merged order keeps a user's
// online before its away or active and its joins, and its leaves before
// its offline, by construction:
//
//   - every call that can make an edge carries the node's floor, the
//     highest log entry ID the node has heard of in any shard, and gives
//     its entries IDs above it and above its shard's log clock, which it
//     raises to them and to the floor; its reply returns the clock, which
//     raises the node's floor (see logTick in lua/prelude_write.lua): an
//     edge made after another was answered, by the same node or by one
//     whose call followed the other's in its shard, sorts after it,
//     whatever the masters' clocks and however many edges share a
//     millisecond;
//   - so a node writes a round of records in waves, each sent once the one
//     before it answered (runWaves): the users that may go online, away or
//     active; then the memberships, whose joins follow their users' online
//     and whose leaves come before their users' offline; then the users
//     that may go offline. A claim and a leave go in phases (reapPhases),
//     memberships first, the same way.
//
// A wave that did not land whole (an error, a call held back or fenced)
// ends the round there: the later waves go back to pending, after what
// did not land, so that none of their edges can overtake one that waits.

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

// heardLog raises this node's floor to a shard's log clock that a reply
// returned (v: "" for a call that took no part).
func (w *writer) heardLog(v any) {
	s, _ := v.(string)
	if id, ok := parseLogID(s); ok && id.after(w.floor) {
		w.floor = id
	}
}

// The waves of a round of records; see above.
const (
	waveUp = iota
	waveMembers
	waveDown
	waves
)

func waveOf(r record) int {
	switch {
	case r.channel != "":
		return waveMembers
	case r.n > 0:
		return waveUp
	}
	return waveDown
}

// runWaves writes recs in mode, wave after wave, each in pipelined
// batches per shard, and returns the records not applied; bare lists shards
// that get a call without records in the first wave (a reassert begins the
// node's next life in every shard it names). In mode restore, the shards of
// the waves not sent are marked for restoring again instead.
func (w *writer) runWaves(ctx context.Context, recs []record, mode int, bare []int) ([]record, error) {
	var byWave [waves][]record
	for _, r := range recs {
		byWave[waveOf(r)] = append(byWave[waveOf(r)], r)
	}
	var failed []record
	for i, wave := range byWave {
		var calls []scriptCall
		if i == 0 {
			for _, s := range bare {
				calls = append(calls, w.setCall(s, nil, mode))
			}
		}
		perShard := make([][]record, len(w.keys))
		for _, r := range wave {
			s := w.recordShard(r)
			perShard[s] = append(perShard[s], r)
		}
		for s, rs := range perShard {
			for len(rs) > 0 {
				n := min(len(rs), w.cfg.Batch)
				calls = append(calls, w.setCall(s, rs[:n], mode))
				rs = rs[n:]
			}
		}
		if len(calls) == 0 {
			continue
		}
		f, whole, err := w.runSet(ctx, calls, mode)
		failed = append(failed, f...)
		if err == nil && whole {
			continue
		}
		for _, later := range byWave[i+1:] {
			if mode == modeRestore {
				for _, r := range later {
					w.restore[w.recordShard(r)] = true
				}
			} else {
				failed = append(failed, later...)
			}
		}
		return failed, err
	}
	return failed, nil
}

// inLogOrder sorts edges as a reader of the log merges them: by their
// entries' (ms, n, shard); an edge without an entry (none is made so) goes
// last.
func (b *base) inLogOrder(edges []presence.Edge) {
	type key struct {
		id    logID
		shard int
		ok    bool
	}
	keys := make(map[string]key, len(edges))
	prefix := "evt_" + b.cfg.Prefix + "_"
	for _, e := range edges {
		rest, _ := strings.CutPrefix(e.ID, prefix)
		shard, entry, _ := strings.Cut(rest, "_")
		s, err := strconv.Atoi(shard)
		id, ok := parseLogID(entry)
		keys[e.ID] = key{id, s, ok && err == nil}
	}
	slices.SortStableFunc(edges, func(x, y presence.Edge) int {
		a, b := keys[x.ID], keys[y.ID]
		switch {
		case a.ok != b.ok:
			if a.ok {
				return -1
			}
			return 1
		case a.id.after(b.id):
			return 1
		case b.id.after(a.id):
			return -1
		}
		return cmp.Compare(a.shard, b.shard)
	})
}
