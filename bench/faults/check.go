package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Bounds of the checker. lag is how long a change on a healthy node may
// take to become an edge (a tick, a batch, a busy machine); recovery is how
// long after a fault heals its node (or every node, for a fault of Redis)
// counts as unhealthy: time to be claimed, to learn it, to write back.
const (
	lag        = 2 * time.Second
	recovery   = 4*timeout + 2*time.Second
	minHealthy = time.Second // a shorter healthy stretch may be coalesced away
)

// anomaly is one broken promise, at a moment, for a user or a membership
// (key "uid" or "uid@channel"), or for the run ("").
type anomaly struct {
	at   time.Time
	key  string
	kind string
	what string
}

// history is what the checker works on.
type history struct {
	start, end time.Time
	ivs        []interval
	posts      []post
	faults     []*fault
	replay     *replayRecord // nil: no replayer ran

	edges   map[string][]event // by key, in order of at
	tabs    map[string][]interval
	found   []anomaly
	counted struct {
		posts, refused, redelivered, repeatedIDs, events int
		offInReach                                       int // off edges within a fault's reach, connected since before it
		replay                                           replayCounts
	}
}

func keyOf(e event) string {
	if e.Channel != "" {
		return e.UID + "@" + e.Channel
	}
	return e.UID
}

// isOn says whether an edge type turns its key on; isEdge whether it is
// one of the presence and membership edges checked.
func isOn(t string) bool   { return t == "online" || t == "join" }
func isEdge(t string) bool { return t == "online" || t == "offline" || t == "join" || t == "leave" }

func (h *history) add(at time.Time, key, kind, format string, args ...any) {
	h.found = append(h.found, anomaly{at: at, key: key, kind: kind, what: fmt.Sprintf(format, args...)})
}

// check runs every check of the history and returns what broke.
func (h *history) check() []anomaly {
	for _, f := range h.faults {
		if f.err != nil {
			h.add(f.start, "", "fault failed", "%s", f)
		}
	}
	h.dedupe()
	h.index()
	h.checkAlternation()
	h.checkFalseOffline()
	h.checkMissing()
	h.checkRecovered()
	h.checkFinal()
	h.checkReplay()
	slices.SortStableFunc(h.found, func(a, b anomaly) int { return a.at.Compare(b.at) })
	return h.found
}

// dedupe keeps each accepted batch once by webhook-id and each event once
// by id; a refused signature, or a batch sent again with other events under
// the same webhook-id, is an anomaly.
func (h *history) dedupe() {
	bodies := map[string]string{}
	events := map[string]bool{}
	h.edges = map[string][]event{}
	for _, p := range h.posts {
		h.counted.posts++
		switch {
		case p.status == 401 || p.status == 400 || p.status == 404:
			h.add(p.got, "", "bad post", "POST %s refused %d: %s", p.id, p.status, p.err)
			continue
		case p.status != 204:
			h.counted.refused++
			continue
		}
		if b, ok := bodies[p.id]; ok {
			h.counted.redelivered++
			if b != p.body {
				h.add(p.got, "", "batch changed", "webhook-id %s sent again with other events", p.id)
			}
			continue
		}
		bodies[p.id] = p.body
		for _, e := range p.events {
			if events[e.ID] {
				h.counted.repeatedIDs++
				continue
			}
			events[e.ID] = true
			if isEdge(e.Type) {
				h.counted.events++
				h.edges[keyOf(e)] = append(h.edges[keyOf(e)], e)
			}
		}
	}
	for _, es := range h.edges {
		slices.SortStableFunc(es, func(a, b event) int { return int(a.At - b.At) })
		alternateTies(es)
	}
}

// alternateTies orders the edges of each millisecond (sorted by at) so that
// they alternate where they can: at holds milliseconds, and edges made by
// different nodes in one millisecond (two writes landing together after a
// freeze) arrive in any order. Two of one kind in a millisecond stay a
// repeat.
func alternateTies(es []event) {
	on := false
	for i := 0; i < len(es); {
		j := i
		for j < len(es) && es[j].At == es[i].At {
			j++
		}
		for k := i; k < j; k++ {
			if next := slices.IndexFunc(es[k:j], func(e event) bool { return isOn(e.Type) != on }); next > 0 {
				es[k], es[k+next] = es[k+next], es[k]
			}
			on = isOn(es[k].Type)
		}
		i = j
	}
}

// index files each interval under its user and its memberships.
func (h *history) index() {
	h.tabs = map[string][]interval{}
	for _, iv := range h.ivs {
		h.tabs[iv.uid] = append(h.tabs[iv.uid], iv)
		for _, ch := range iv.channels {
			h.tabs[iv.uid+"@"+ch] = append(h.tabs[iv.uid+"@"+ch], iv)
		}
	}
}

func (h *history) keys() []string {
	ks := map[string]bool{}
	for k := range h.tabs {
		ks[k] = true
	}
	for k := range h.edges {
		ks[k] = true
	}
	return slices.Sorted(maps.Keys(ks))
}

// checkAlternation: on and off edges alternate, starting with on.
func (h *history) checkAlternation() {
	for k, es := range h.edges {
		on := false
		for _, e := range es {
			if isOn(e.Type) == on {
				h.add(time.UnixMilli(e.At), k, "repeated "+e.Type, "%s %s with the key already %s", e.Type, e.ID, onOff(on))
			}
			on = isOn(e.Type)
		}
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// healthy says whether node was out of every fault's reach at t: no fault
// of it, nor of Redis, from the fault's start to recovery after its heal.
func (h *history) healthy(node int, t time.Time) bool { return h.hitBy(node, t) == nil }

// hitBy is the fault, of those whose reach holds node at t, that began
// first; nil when node was healthy at t.
func (h *history) hitBy(node int, t time.Time) *fault {
	var first *fault
	for _, f := range h.faults {
		if f.start.IsZero() || f.kind.touchesNone() || (!f.kind.touchesAll() && f.node != node) {
			continue
		}
		end := f.end
		if !f.finished {
			end = h.end
		}
		if !t.Before(f.start) && !t.After(end.Add(recovery)) && (first == nil || f.start.Before(first.start)) {
			first = f
		}
	}
	return first
}

// checkFalseOffline: no off edge while a tab of the key had been live on a
// healthy node for lag, and stayed live a little after. Such edges within a
// fault's reach, for a key connected throughout since lag before that fault
// began, are counted, not judged: a node cut off past its lease is rightly
// taken for dead, while after a freeze of Redis there should be none. (An
// off edge of a key that came and went during the fault may be a real
// departure learnt late.)
func (h *history) checkFalseOffline() {
	for k, es := range h.edges {
		for _, e := range es {
			if isOn(e.Type) {
				continue
			}
			t := time.UnixMilli(e.At)
			var since time.Time // when the faults over the live tabs began
			for _, iv := range h.tabs[k] {
				if iv.from.After(t.Add(-lag)) || !iv.to.After(t.Add(500*time.Millisecond)) {
					continue
				}
				f := h.hitBy(iv.node, t)
				if f == nil {
					h.add(t, k, "false "+e.Type, "%s %s while live on healthy node %s since %s", e.Type, e.ID, nodeName(iv.node), h.rel(iv.from))
					since = time.Time{}
					break
				}
				if since.IsZero() || f.start.Before(since) {
					since = f.start
				}
			}
			if all, _ := connected(h.tabs[k], since.Add(-lag), t.Add(500*time.Millisecond)); !since.IsZero() && all {
				h.counted.offInReach++
			}
		}
	}
}

// state is the key's state at t by its edges: on after an on edge.
func (h *history) state(k string, t time.Time) bool {
	on := false
	for _, e := range h.edges[k] {
		if e.At > t.UnixMilli() {
			break
		}
		on = isOn(e.Type)
	}
	return on
}

// onDuring says whether the key was on at some moment of [a, b].
func (h *history) onDuring(k string, a, b time.Time) bool {
	if h.state(k, a) {
		return true
	}
	for _, e := range h.edges[k] {
		if e.At >= a.UnixMilli() && e.At <= b.UnixMilli() && isOn(e.Type) {
			return true
		}
	}
	return false
}

// spans merges a key's intervals into the stretches it was connected.
func spans(ivs []interval) [][2]time.Time {
	ivs = slices.Clone(ivs)
	slices.SortFunc(ivs, func(a, b interval) int { return a.from.Compare(b.from) })
	var out [][2]time.Time
	for _, iv := range ivs {
		if n := len(out); n > 0 && !iv.from.After(out[n-1][1]) {
			if iv.to.After(out[n-1][1]) {
				out[n-1][1] = iv.to
			}
			continue
		}
		out = append(out, [2]time.Time{iv.from, iv.to})
	}
	return out
}

// checkMissing: a key connected through a stretch of minHealthy on a
// healthy node was on at some moment of it (or within lag after).
func (h *history) checkMissing() {
	const step = 100 * time.Millisecond
	for k, ivs := range h.tabs {
		for _, sp := range spans(ivs) {
			run, need := time.Duration(0), false
			for t := sp[0]; !t.After(sp[1]) && !need; t = t.Add(step) {
				ok := slices.ContainsFunc(ivs, func(iv interval) bool {
					return !t.Before(iv.from) && !t.After(iv.to) && h.healthy(iv.node, t)
				})
				if ok {
					run += step
				} else {
					run = 0
				}
				need = run >= minHealthy
			}
			if need && !h.onDuring(k, sp[0], sp[1].Add(lag)) {
				h.add(sp[0], k, "missing on", "connected %s-%s with a healthy stretch, never on", h.rel(sp[0]), h.rel(sp[1]))
			}
		}
	}
}

// connected says whether a tab of the key was live at every moment of
// [a, b] (all), or at some moment (any).
func connected(ivs []interval, a, b time.Time) (all, any bool) {
	for _, sp := range spans(ivs) {
		if !sp[0].After(a) && !sp[1].Before(b) {
			return true, true
		}
		if !sp[0].After(b) && !sp[1].Before(a) {
			any = true
		}
	}
	return false, any
}

// checkRecovered: recovery after each fault healed, unless the next fault
// came first, every key connected (or not) for the last lag has the state
// it should.
func (h *history) checkRecovered() {
	keys := h.keys()
	for i, f := range h.faults {
		if !f.finished {
			continue
		}
		t := f.end.Add(recovery)
		if t.After(h.end) || i+1 < len(h.faults) && !h.faults[i+1].start.IsZero() && !h.faults[i+1].start.After(t) {
			continue
		}
		for _, k := range keys {
			all, any := connected(h.tabs[k], t.Add(-lag), t)
			if all == any && h.state(k, t) != all {
				h.add(t, k, "not recovered", "%s at %s, %v after %s healed, while %s", onOff(!all), h.rel(t), recovery, f, map[bool]string{true: "connected", false: "gone"}[all])
			}
		}
	}
}

// checkFinal: at the end, after the settle, each key's last edge (even one
// that came after the end) matches whether it is connected.
func (h *history) checkFinal() {
	for _, k := range h.keys() {
		all, _ := connected(h.tabs[k], h.end, h.end)
		if h.state(k, h.end.Add(time.Hour)) != all {
			h.add(h.end, k, "final state", "last edge says %s, %s", onOff(!all), map[bool]string{true: "connected", false: "gone"}[all])
		}
	}
}

// rel is t as seconds from the run's start.
func (h *history) rel(t time.Time) string { return fmt.Sprintf("%.2f s", t.Sub(h.start).Seconds()) }

// expected is who is online, and who is a member of each channel, at the
// end by the clients' truth.
func (h *history) expected() (users []string, members map[string][]string) {
	members = map[string][]string{}
	on := map[string]bool{}
	for _, iv := range h.ivs {
		if iv.to.Before(h.end) {
			continue
		}
		on[iv.uid] = true
		for _, ch := range iv.channels {
			if !slices.Contains(members[ch], iv.uid) {
				members[ch] = append(members[ch], iv.uid)
			}
		}
	}
	for _, m := range members {
		slices.Sort(m)
	}
	return slices.Sorted(maps.Keys(on)), members
}

// diff names what got lacks and holds beyond want, both sorted.
func diff(want, got []string) string {
	var missing, extra []string
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok {
			extra = append(extra, g)
		}
	}
	if len(missing)+len(extra) == 0 {
		return ""
	}
	return fmt.Sprintf("missing %s; extra %s", short(missing), short(extra))
}

func short(ids []string) string {
	if len(ids) > 10 {
		return fmt.Sprintf("%s ... (%d)", strings.Join(ids[:10], " "), len(ids))
	}
	return "[" + strings.Join(ids, " ") + "]"
}
