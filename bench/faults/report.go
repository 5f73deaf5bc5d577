package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// maxShown is how many anomalies a report shows with their timelines.
const maxShown = 40

// report is a run's counts and, for each anomaly (up to maxShown), a short
// timeline: the faults around it, the key's edges and connections near it.
func (h *history) report(seed uint64, mode string) string {
	var b strings.Builder
	byKind := map[kind]int{}
	for _, f := range h.faults {
		if !f.start.IsZero() {
			byKind[f.kind]++
		}
	}
	var fk []string
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		fk = append(fk, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	fmt.Fprintf(&b, "seed %d, mode %s, %.0f s: %d connections, %d edges (%d POSTs, %d answered 503, %d batches redelivered, %d event ids repeated, %d offs within a fault's reach while connected since before it); faults: %s\n",
		seed, mode, h.end.Sub(h.start).Seconds(), len(h.ivs), h.counted.events, h.counted.posts, h.counted.refused,
		h.counted.redelivered, h.counted.repeatedIDs, h.counted.offInReach, strings.Join(fk, ", "))
	if h.replay != nil {
		r := h.counted.replay
		fmt.Fprintf(&b, "replay: %d catch-ups (%d judged, %d keys in all; %d with no mark out of the faults' reach; longest %.1f s), %d events replayed, %d answered 410, %d snapshots; %d webhook events in the spans read, %d logged edges there no webhook carried\n",
			r.catchUps, r.judged, r.keys, r.unjudged, r.longest.Seconds(), r.events, r.gone, r.snapshots, r.inWebhook, r.notInWebhook)
	}
	if len(h.found) == 0 {
		b.WriteString("no anomaly\n")
		return b.String()
	}
	byAnomaly := map[string]int{}
	for _, a := range h.found {
		byAnomaly[a.kind]++
	}
	var ak []string
	for _, k := range slices.Sorted(maps.Keys(byAnomaly)) {
		ak = append(ak, fmt.Sprintf("%s %d", k, byAnomaly[k]))
	}
	fmt.Fprintf(&b, "SEED %d: %d anomalies: %s\n", seed, len(h.found), strings.Join(ak, ", "))
	for i, a := range h.found {
		if i == maxShown {
			fmt.Fprintf(&b, "... %d more\n", len(h.found)-maxShown)
			break
		}
		fmt.Fprintf(&b, "\n%s %s: %s: %s\n", h.rel(a.at), orRun(a.key), a.kind, a.what)
		h.timeline(&b, a)
	}
	return b.String()
}

func orRun(key string) string {
	if key == "" {
		return "(run)"
	}
	return key
}

// timeline writes, in time order, the faults active within 30 s before
// and 5 s after a, and the key's edges and connections within 10 s.
func (h *history) timeline(b *strings.Builder, a anomaly) {
	type line struct {
		at   time.Time
		text string
	}
	var ls []line
	for _, f := range h.faults {
		if !f.start.IsZero() && f.start.Before(a.at.Add(5*time.Second)) && f.end.After(a.at.Add(-30*time.Second)) {
			ls = append(ls, line{f.start, fmt.Sprintf("fault %s-%s: %s", h.rel(f.start), h.rel(f.end), f)})
		}
	}
	near := func(t time.Time) bool {
		return t.After(a.at.Add(-10*time.Second)) && t.Before(a.at.Add(10*time.Second))
	}
	if a.key != "" {
		for _, e := range h.edges[a.key] {
			if t := time.UnixMilli(e.At); near(t) {
				ls = append(ls, line{t, fmt.Sprintf("edge %s %s (%s)", h.rel(t), e.Type, e.ID)})
			}
		}
		for _, iv := range h.tabs[a.key] {
			if near(iv.from) || near(iv.to) || iv.from.Before(a.at) && iv.to.After(a.at) {
				ls = append(ls, line{iv.from, fmt.Sprintf("tab on %s %s-%s", nodeName(iv.node), h.rel(iv.from), h.rel(iv.to))})
			}
		}
	}
	if r := h.replay; r != nil {
		for _, cu := range r.catchUps {
			if near(cu.down[0]) || near(cu.down[1]) || near(cu.end) {
				ls = append(ls, line{cu.down[0], fmt.Sprintf("replayer down %s-%s, up to date %s", h.rel(cu.down[0]), h.rel(cu.down[1]), h.rel(cu.end))})
			}
		}
		for i, s := range r.segments {
			if s.snapshot && near(s.start) {
				ls = append(ls, line{s.start, fmt.Sprintf("replayer snapshot %s (segment %d)", h.rel(s.start), i)})
			}
		}
		// Every replayed edge of the key's user: the log's order rules tie a
		// user's edges to its memberships'.
		uid, _, _ := strings.Cut(a.key, "@")
		for _, e := range r.events {
			k := keyOf(e.event)
			if t := time.UnixMilli(e.At); a.key != "" && e.UID == uid && near(t) {
				ls = append(ls, line{t, fmt.Sprintf("replayed %s %s %s (%s, segment %d)", h.rel(t), k, e.Type, e.ID, e.segment)})
			}
		}
	}
	slices.SortStableFunc(ls, func(x, y line) int { return x.at.Compare(y.at) })
	for _, l := range ls {
		fmt.Fprintf(b, "    %s\n", l.text)
	}
}

// save writes the raw history into dir, one JSON object a line, to read an
// anomaly further than its timeline: webhook.jsonl has every POST as the
// receiver got it, clients.jsonl every live interval, replay.jsonl every
// event the replayer read, in the log's order, replay-snapshots.jsonl each
// snapshot it took; times are seconds from the start, an event's at too.
func (h *history) save(dir string) error {
	sec := func(t time.Time) float64 { return t.Sub(h.start).Seconds() }
	write := func(name string, each func(enc *json.Encoder) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		err = each(json.NewEncoder(bw))
		return errors.Join(err, bw.Flush(), f.Close())
	}
	type ev struct {
		ID, Type, Channel, UID string
		At                     float64
	}
	err := write("webhook.jsonl", func(enc *json.Encoder) error {
		for _, p := range h.posts {
			evs := make([]ev, len(p.events))
			for i, e := range p.events {
				evs[i] = ev{e.ID, e.Type, e.Channel, e.UID, sec(time.UnixMilli(e.At))}
			}
			if err := enc.Encode(struct {
				Got    float64
				ID     string
				Status int
				Err    string `json:",omitempty"`
				Events []ev
			}{sec(p.got), p.id, p.status, p.err, evs}); err != nil {
				return err
			}
		}
		return nil
	})
	if r := h.replay; r != nil {
		err = errors.Join(err, write("replay-snapshots.jsonl", func(enc *json.Encoder) error {
			for i, s := range r.segments {
				if !s.snapshot {
					continue
				}
				if err := enc.Encode(struct {
					Segment int
					At      float64
					Users   []string
					Members map[string][]string
				}{i, sec(s.start), s.users, s.members}); err != nil {
					return err
				}
			}
			return nil
		}))
		err = errors.Join(err, write("replay.jsonl", func(enc *json.Encoder) error {
			for _, e := range r.events {
				if err := enc.Encode(struct {
					ID, Type, Channel, UID string
					At                     float64
					Segment                int
				}{e.ID, e.Type, e.Channel, e.UID, sec(time.UnixMilli(e.At)), e.segment}); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	return errors.Join(err, write("clients.jsonl", func(enc *json.Encoder) error {
		for _, iv := range h.ivs {
			if err := enc.Encode(struct {
				UID, Node string
				Channels  []string
				From, To  float64
			}{iv.uid, nodeName(iv.node), iv.channels, sec(iv.from), sec(iv.to)}); err != nil {
				return err
			}
		}
		return nil
	}))
}
