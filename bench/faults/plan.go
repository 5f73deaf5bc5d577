package main

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// step is one entry of a fixed schedule: a kind of fault, run count
// times, each lasting dur on one node.
type step struct {
	kind  kind
	node  int           // -1: drawn from the seed for each fault
	dur   time.Duration // 0: drawn from the kind's range for each fault
	count int
}

// parsePlan reads a fixed schedule: steps separated by commas, each
//
//	kind[@node][:duration][*count]
//
// such as "redis-stop:6s*3" (three 6 s Redis freezes) or
// "link-stall@B:7s*3,node-kill" (three 7 s stalls of node B's link, then a
// node killed). A node is a letter from A; without one each fault draws
// its node, without a duration its length, as a drawn schedule does; count
// is 1 unless given. An error names the step and the part that is wrong.
func parsePlan(s string, nodes int) ([]step, error) {
	var out []step
	for i, item := range strings.Split(s, ",") {
		st, err := parseStep(strings.TrimSpace(item), nodes)
		if err != nil {
			return nil, fmt.Errorf("schedule step %d %q: %w", i+1, item, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// maxCount bounds a step's count: a schedule is run in real time.
const maxCount = 1000

func parseStep(item string, nodes int) (step, error) {
	st := step{node: -1, count: 1}
	rest, count, hasCount := strings.Cut(item, "*")
	if hasCount {
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 || n > maxCount {
			return st, fmt.Errorf("count %q: want a whole number from 1 to %d", count, maxCount)
		}
		st.count = n
	}
	rest, dur, hasDur := strings.Cut(rest, ":")
	name, node, hasNode := strings.Cut(rest, "@")
	st.kind = kind(name)
	if _, ok := allKinds[st.kind]; !ok {
		return st, fmt.Errorf("kind %q: want one of %s", name, kindNames())
	}
	if hasNode {
		if st.kind.touchesAll() || st.kind == sentinelFailover {
			return st, fmt.Errorf("node %q: %s hits no one node", node, st.kind)
		}
		if len(node) != 1 || node[0] < 'A' || int(node[0]-'A') >= nodes {
			return st, fmt.Errorf("node %q: want a letter from A to %s", node, nodeName(nodes-1))
		}
		st.node = int(node[0] - 'A')
	}
	if hasDur {
		if _, ok := durations[st.kind]; !ok {
			return st, fmt.Errorf("duration %q: %s takes none", dur, st.kind)
		}
		d, err := time.ParseDuration(dur)
		if err != nil || d <= 0 || d > time.Hour {
			return st, fmt.Errorf("duration %q: want a length such as 500ms or 6s, at most an hour", dur)
		}
		st.dur = d
	}
	return st, nil
}

// allKinds is every kind of every mode.
var allKinds = func() map[kind]bool {
	m := map[kind]bool{}
	for _, ks := range modeKinds {
		for _, k := range ks {
			m[k] = true
		}
	}
	return m
}()

func kindNames() string {
	var names []string
	for _, k := range slices.Sorted(maps.Keys(allKinds)) {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}

// planned is the faults of a fixed schedule, in order: what the steps
// leave open (node, length) and the waits between faults are drawn from
// seed as schedule draws them.
func planned(seed uint64, steps []step, nodes int, warmup time.Duration, gap [2]time.Duration) []*fault {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []*fault
	wait := warmup
	for _, st := range steps {
		for range st.count {
			f := &fault{kind: st.kind, node: st.node, wait: wait, dur: st.dur}
			if f.node < 0 {
				f.node = r.IntN(nodes)
			}
			if d := durations[st.kind]; f.dur == 0 {
				f.dur = between(r, d[0], d[1])
			}
			out = append(out, f)
			wait = between(r, gap[0], gap[1])
		}
	}
	return out
}

// plannedKinds is the kinds a fixed schedule runs.
func plannedKinds(steps []step) []kind {
	var out []kind
	for _, st := range steps {
		out = append(out, st.kind)
	}
	return out
}
