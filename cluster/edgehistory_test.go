package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/presenced/presenced/presence"
)

// A user's online and offline edges, merged over the nodes that made them,
// are the whole cluster's account of the user: they must alternate,
// starting with online, each edge once.

// presenceEdge is one online or offline edge a node made.
type presenceEdge struct {
	at time.Time // Redis's clock: orders edges made on different nodes
	on bool
}

// presenceEdges returns the online and offline edges of uid this node
// made, in the order it handed them on.
func (r *recorder) presenceEdges(uid string) []presenceEdge {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []presenceEdge
	for _, e := range r.made {
		if e.UID == uid && (e.Kind == presence.EdgeOnline || e.Kind == presence.EdgeOffline) {
			out = append(out, presenceEdge{e.At, e.Kind == presence.EdgeOnline})
		}
	}
	return out
}

// mergedEdges returns uid's online and offline edges made by any of nodes,
// in Redis's order: by the Redis clock, each node's own in the order it
// handed them on where the clock ties. A node hands on an edge whose
// reply was lost with its next call, later than edges made after it:
// the clock puts it back in its place.
func mergedEdges(nodes []*node, uid string) []presenceEdge {
	var all []presenceEdge
	for _, n := range nodes {
		all = append(all, n.rec.presenceEdges(uid)...)
	}
	slices.SortStableFunc(all, func(a, b presenceEdge) int { return a.at.Compare(b.at) })
	return all
}

// alternation tells whether edges can be the history of one user: online
// and offline by turns, starting with online. Edges within one
// millisecond of the clock may have happened in either order (two nodes'
// calls), so each such group only needs some order that alternates. It
// returns the state the edges leave the user in, and what is wrong if
// they cannot be such a history.
func alternation(edges []presenceEdge) (online bool, wrong string) {
	for i := 0; i < len(edges); {
		j := i
		ons := 0
		for j < len(edges) && edges[j].at.Equal(edges[i].at) {
			if edges[j].on {
				ons++
			}
			j++
		}
		offs := j - i - ons
		// From online, the group must go off, on, off...; from offline,
		// on, off, on...
		first, second := ons, offs
		if online {
			first, second = offs, ons
		}
		switch first - second {
		case 0:
		case 1:
			online = !online
		default:
			// Too many of the first kind, or more of the second than the first.
			twiceOn := (first-second < 0) == online
			return online, fmt.Sprintf("%s: %s at edge %d", edgeWords(edges), edgeWord(twiceOn), i+1)
		}
		i = j
	}
	return online, ""
}

func edgeWord(on bool) string {
	if on {
		return "online twice"
	}
	return "offline twice"
}

// edgeWords spells edges as "on,off,on".
func edgeWords(edges []presenceEdge) string {
	words := make([]string, len(edges))
	for i, e := range edges {
		words[i] = "off"
		if e.on {
			words[i] = "on"
		}
	}
	return strings.Join(words, ",")
}
