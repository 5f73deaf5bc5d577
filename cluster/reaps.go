package cluster

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// maxReaps bounds the nodes a claimer remembers per shard: a node's
// reaps are rare, and the oldest is the least likely to come back.
const maxReaps = 64

// reaps remembers, per shard, the nodes this node's claims reaped in full,
// the life each reap ended and when (Redis's clock, ms), until they come
// back in a later life or the last-seen TTL has passed. Redis keeps that
// end (T:reaped and T:life), so that the node owes its records' edges
// when it returns; a Redis that lost its data has lost the end too, and
// each claim hands these back for the script to write again (see remark in
// the scripts). Owned by the loop.
type reaps []map[string]reap

// A reap is one remembered end of a node's life.
type reap struct{ life, at int64 }

// args returns shard's remembered reaps as the claim script's trailing
// arguments: node, life, ms, node, life, ms, ...
func (r reaps) args(shard int) []any {
	var out []any
	for node, p := range r[shard] {
		out = append(out, node, p.life, p.at)
	}
	return out
}

// update takes in what a claim call in shard reported: the nodes it reaped
// in full at now ("node life", comma-separated), and those to forget
// (comma-separated).
func (r reaps) update(shard int, now int64, reaped, forgot string) {
	m := r[shard]
	for node := range strings.SplitSeq(forgot, ",") {
		delete(m, node)
	}
	for entry := range strings.SplitSeq(reaped, ",") {
		node, life, ok := strings.Cut(entry, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(life, 10, 64)
		if err != nil {
			continue
		}
		if m == nil {
			m = make(map[string]reap)
			r[shard] = m
		}
		m[node] = reap{life: n, at: now}
	}
	for len(m) > maxReaps {
		oldest, at := "", int64(0)
		for node, p := range m {
			if oldest == "" || p.at < at {
				oldest, at = node, p.at
			}
		}
		delete(m, oldest)
	}
}

// deadNodes gathers, over one claim, the nodes some shard found dead, and
// what each shard knows of them: found there, or told. A node is dead in
// every shard once it is dead in one (see the claim script), so each shard
// is told of the others' before the claim goes on to its next phase.
type deadNodes []map[string]bool

// found takes in the dead nodes shard reported (comma-separated).
func (d deadNodes) found(shard int, nodes string) {
	for node := range strings.SplitSeq(nodes, ",") {
		if node == "" {
			continue
		}
		if d[shard] == nil {
			d[shard] = make(map[string]bool)
		}
		d[shard][node] = true
	}
}

// all returns every node some shard found dead, sorted.
func (d deadNodes) all() []string {
	set := map[string]bool{}
	for _, m := range d {
		maps.Copy(set, m)
	}
	return slices.Sorted(maps.Keys(set))
}

// tell returns, for shard's next call, the nodes found dead elsewhere, and
// counts them as known there.
func (d deadNodes) tell(shard int) string {
	list := strings.Join(d.all(), ",")
	d.found(shard, list)
	return list
}

// untold adds to more the shards that do not know of every dead node yet.
func (d deadNodes) untold(more []int) []int {
	all := d.all()
	for s, m := range d {
		if len(m) < len(all) && !slices.Contains(more, s) {
			more = append(more, s)
		}
	}
	return more
}
