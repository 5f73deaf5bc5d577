package main

import (
	"maps"
	"slices"
	"time"
)

// replayWindow is how long a key must have been steady (connected, or
// gone, throughout) before a mark for its state to be judged: an edge
// takes up to lag to be made and replayDelay to show in the log.
const replayWindow = lag + replayDelay

// replayCounts are the replayer's figures for the report.
type replayCounts struct {
	catchUps, events, gone, snapshots int
	longest                           time.Duration // from up to up to date
	judged                            int           // catch-ups whose state was judged
	keys                              int           // keys judged over those catch-ups
	unjudged                          int           // catch-ups with no mark out of every fault's reach before the next down
	inWebhook                         int           // webhook events within the spans the log was read over, each looked up
	notInWebhook                      int           // logged edges in those spans that no accepted POST carried
}

// checkReplay checks what the replayer read: the order rules and repeated
// ids it found as it applied the edges; its state after each catch-up, at
// its first mark out of every fault's reach, against the clients' (keys
// steady for replayWindow); its final state against the clients' at the
// end; and that every event the webhook carried within the spans the log
// was read over is in the log.
func (h *history) checkReplay() {
	r := h.replay
	if r == nil {
		return
	}
	c := &h.counted.replay
	c.catchUps, c.events, c.gone, c.snapshots = len(r.catchUps), len(r.events), r.gone, r.snapshots
	if !r.noLog.IsZero() {
		h.add(r.noLog, "", "replay: no log", "a node answered GET /api/events with 501: its engine keeps no log of edges")
		return
	}
	h.found = append(h.found, r.problems...)
	for i, cu := range r.catchUps {
		c.longest = max(c.longest, cu.end.Sub(cu.down[1]))
		next := h.end
		if i+1 < len(r.catchUps) {
			next = r.catchUps[i+1].down[0]
		}
		j := slices.IndexFunc(r.marks, func(m mark) bool {
			return !m.at.Before(cu.end) && m.at.Before(next) && h.quiet(m.at)
		})
		if j < 0 {
			c.unjudged++
			continue
		}
		c.judged++
		h.judgeMark(r.marks[j], cu)
	}
	if r.final == nil {
		h.add(h.end, "", "replay final state", "the replayer never came up to date after the run settled")
	} else {
		h.judgeFinal(*r.final)
	}
	h.checkLogHoldsWebhook(r)
}

// quiet says whether t, and replayWindow before it, are out of every
// fault's reach on every node.
func (h *history) quiet(t time.Time) bool {
	for n := range nodes {
		if !h.healthy(n, t) || !h.healthy(n, t.Add(-replayWindow)) {
			return false
		}
	}
	return true
}

// judgeMark compares a mark with the clients for each key connected, or
// gone, throughout the replayWindow before it.
func (h *history) judgeMark(m mark, cu catchUp) {
	keys := map[string]bool{}
	for _, k := range h.keys() {
		keys[k] = true
	}
	maps.Copy(keys, m.on)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		all, any := connected(h.tabs[k], m.at.Add(-replayWindow), m.at)
		if all != any {
			continue
		}
		h.counted.replay.keys++
		if m.on[k] != all {
			h.add(m.at, k, "replay state", "%s by the log at %s, %s while %s; after %s down %s-%s",
				onOff(m.on[k]), h.rel(m.at), h.rel(cu.end), map[bool]string{true: "connected", false: "gone"}[all],
				cu.down[1].Sub(cu.down[0]).Round(time.Second), h.rel(cu.down[0]), h.rel(cu.down[1]))
		}
	}
}

// judgeFinal compares the final mark with the clients at the end, every
// key: the churn had stopped and the run settled.
func (h *history) judgeFinal(m mark) {
	users, members := h.expected()
	want := map[string]bool{}
	for _, u := range users {
		want[u] = true
	}
	for ch, uids := range members {
		for _, u := range uids {
			want[u+"@"+ch] = true
		}
	}
	if d := diffKeys(want, m.on); d != "" {
		h.add(h.end, "", "replay final state", "by the log at %s: %s", h.rel(m.at), d)
	}
}

// checkLogHoldsWebhook: every event an accepted POST carried, made within
// a span the log was read over without a break (after the segment's
// snapshot, up to replayDelay before its last read that found nothing
// newer), was read from the log. It also counts the logged edges of those
// spans that no accepted POST carried: the webhook may drop past its queue.
func (h *history) checkLogHoldsWebhook(r *replayRecord) {
	covered := func(at int64) bool {
		t := time.UnixMilli(at)
		return slices.ContainsFunc(r.segments, func(s segment) bool {
			return t.After(s.start) && t.Before(s.quiet.Add(-replayDelay))
		})
	}
	hooked := map[string]bool{}
	for _, p := range h.posts {
		if p.status != 204 {
			continue
		}
		for _, e := range p.events {
			if hooked[e.ID] {
				continue
			}
			hooked[e.ID] = true
			if !covered(e.At) {
				continue
			}
			h.counted.replay.inWebhook++
			if _, ok := r.ids[e.ID]; !ok {
				h.add(time.UnixMilli(e.At), keyOf(e), "not in the log", "%s %s came by webhook, made within a span the log was read over, and the log never gave it", e.Type, e.ID)
			}
		}
	}
	for _, e := range r.events {
		if covered(e.At) && !hooked[e.ID] {
			h.counted.replay.notInWebhook++
		}
	}
}
