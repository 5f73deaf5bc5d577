package cluster

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// The steps of the model test (model_test.go): what the test does to the
// cluster, drawn at random from a seed, and written and read back as text
// so that a failing history can be run again (-model.history).

type stepKind int

const (
	stepConnect  stepKind = iota // a connection of user on node opens
	stepClose                    // one closes
	stepWait                     // time passes: renewals, claims, leases running out
	stepCut                      // node's link to Redis is cut (proxy.cut)
	stepStall                    // node's link holds its bytes, delivered late (proxy.stall): replies lost
	stepSwallow                  // node's link hangs on new connections (proxy.swallow)
	stepMute                     // node's link drops what the node sends (proxy.mute)
	stepRestore                  // node's link is whole again: the node comes back
	stepRestart                  // Redis restarts empty
	stepDetach                   // the replica stops following: it misses what comes next
	stepFailover                 // the replica takes over, with whatever it missed
	stepHeal                     // every link is whole again
)

var stepNames = [...]string{stepConnect: "connect", stepClose: "close", stepWait: "wait", stepCut: "cut",
	stepStall: "stall", stepSwallow: "swallow", stepMute: "mute", stepRestore: "restore",
	stepRestart: "restart", stepDetach: "detach", stepFailover: "failover", stepHeal: "heal"}

type step struct {
	kind stepKind
	node int // connect, close, and the link's steps
	user int // connect, close
	wait time.Duration
}

func nodeName(i int) string { return string(rune('a' + i)) }

func (s step) String() string {
	name := stepNames[s.kind]
	switch s.kind {
	case stepConnect, stepClose:
		return fmt.Sprintf("%s %s u%d", name, nodeName(s.node), s.user)
	case stepWait:
		return fmt.Sprintf("%s %v", name, s.wait)
	case stepCut, stepStall, stepSwallow, stepMute, stepRestore:
		return name + " " + nodeName(s.node)
	}
	return name
}

// isLinkFault tells the steps that break a node's link.
func (k stepKind) isLinkFault() bool {
	return k == stepCut || k == stepStall || k == stepSwallow || k == stepMute
}

// historyText writes a history as -model.history reads it.
func historyText(nodes int, steps []step) string {
	words := []string{strconv.Itoa(nodes) + " nodes"}
	for _, s := range steps {
		words = append(words, s.String())
	}
	return strings.Join(words, "; ")
}

// parseHistory reads what historyText wrote.
func parseHistory(text string) (int, []step, error) {
	parts := strings.Split(text, ";")
	nodes, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(parts[0]), " nodes"))
	if err != nil || nodes < 1 || nodes > 26 {
		return 0, nil, fmt.Errorf("a history starts with its number of nodes, \"2 nodes\": %q", parts[0])
	}
	var steps []step
	for _, p := range parts[1:] {
		f := strings.Fields(p)
		if len(f) == 0 {
			continue
		}
		kind := -1
		for k, name := range stepNames {
			if name == f[0] {
				kind = k
			}
		}
		if kind < 0 {
			return 0, nil, fmt.Errorf("unknown step %q", p)
		}
		s := step{kind: stepKind(kind)}
		arg := func(i int) string {
			if i < len(f) {
				return f[i]
			}
			return ""
		}
		switch s.kind {
		case stepWait:
			if s.wait, err = time.ParseDuration(arg(1)); err != nil {
				return 0, nil, fmt.Errorf("step %q: %w", p, err)
			}
		case stepConnect, stepClose, stepCut, stepStall, stepSwallow, stepMute, stepRestore:
			if n := arg(1); len(n) != 1 || int(n[0]-'a') >= nodes {
				return 0, nil, fmt.Errorf("step %q names no node of %d", p, nodes)
			}
			s.node = int(arg(1)[0] - 'a')
			if s.kind == stepConnect || s.kind == stepClose {
				if s.user, err = strconv.Atoi(strings.TrimPrefix(arg(2), "u")); err != nil || s.user < 0 || s.user >= modelUsers {
					return 0, nil, fmt.Errorf("step %q names no user u0…u%d", p, modelUsers-1)
				}
			}
		}
		steps = append(steps, s)
	}
	return nodes, steps, nil
}

// modelUsers is how many users the model's connections are of.
const modelUsers = 5

// genState is what the generator knows of the cluster, to draw steps
// that do something: closes of open connections, restores of broken
// links.
type genState struct {
	conns    [][modelUsers]int
	fault    []bool
	attached bool
}

// weighted is one choice of the generator, and how likely it is.
type weighted struct {
	w    float64
	step func() step
}

// generate draws a history of n steps for nodes nodes from rng; motifs
// weighs the fault motifs (see motif) against the single steps.
func generate(rng *rand.Rand, nodes, n int, motifs float64) []step {
	st := genState{conns: make([][modelUsers]int, nodes), fault: make([]bool, nodes), attached: true}
	pick := func(ok func(int) bool) (int, bool) {
		var is []int
		for i := range nodes {
			if ok(i) {
				is = append(is, i)
			}
		}
		if len(is) == 0 {
			return 0, false
		}
		return is[rng.IntN(len(is))], true
	}
	var steps []step
	for len(steps) < n {
		var choices []weighted
		add := func(w float64, f func() step) { choices = append(choices, weighted{w, f}) }
		add(3, func() step { return step{kind: stepConnect, node: rng.IntN(nodes), user: rng.IntN(modelUsers)} })
		type held struct{ node, user int }
		var open []held
		for i := range nodes {
			for u := range modelUsers {
				if st.conns[i][u] > 0 {
					open = append(open, held{i, u})
				}
			}
		}
		if len(open) > 0 {
			add(2, func() step { h := open[rng.IntN(len(open))]; return step{kind: stepClose, node: h.node, user: h.user} })
		}
		add(3, func() step {
			waits := []time.Duration{300 * time.Millisecond, time.Second, 2500 * time.Millisecond, 2500 * time.Millisecond}
			return step{kind: stepWait, wait: waits[rng.IntN(len(waits))]}
		})
		if up, ok := pick(func(i int) bool { return !st.fault[i] }); ok {
			add(3, func() step {
				kinds := []stepKind{stepCut, stepCut, stepCut, stepStall, stepSwallow, stepMute}
				return step{kind: kinds[rng.IntN(len(kinds))], node: up}
			})
		}
		if down, ok := pick(func(i int) bool { return st.fault[i] }); ok {
			add(3, func() step { return step{kind: stepRestore, node: down} })
			add(0.5, func() step { return step{kind: stepHeal} })
		}
		add(1, func() step { return step{kind: stepRestart} })
		if st.attached {
			add(0.5, func() step { return step{kind: stepDetach} })
		}
		add(0.7, func() step { return step{kind: stepFailover} })
		if nodes > 1 && motifs > 0 {
			add(motifs, nil)
		}
		total := 0.0
		for _, c := range choices {
			total += c.w
		}
		x := rng.Float64() * total
		chosen := choices[len(choices)-1] // should rounding leave x at total
		for _, c := range choices {
			if x -= c.w; x < 0 {
				chosen = c
				break
			}
		}
		if chosen.step == nil {
			for _, s := range motif(rng, nodes) {
				st.apply(s)
				steps = append(steps, s)
			}
			continue
		}
		s := chosen.step()
		st.apply(s)
		steps = append(steps, s)
	}
	return steps[:n]
}

// motif draws a sequence of steps around a loss of Redis's data (a
// restart, or a failover to a replica detached before) while links break
// and come back: node x's link breaks long enough for its lease to run
// out, y's breaks too, x comes back, and perhaps goes again, before the
// loss; then the broken links come back, in either order. Each step but
// the loss may be left out, so the motif also draws its simpler cases.
func motif(rng *rand.Rand, nodes int) []step {
	x := rng.IntN(nodes)
	y := (x + 1 + rng.IntN(nodes-1)) % nodes
	fault := func(node int) step {
		kinds := []stepKind{stepCut, stepCut, stepCut, stepStall, stepSwallow, stepMute}
		return step{kind: kinds[rng.IntN(len(kinds))], node: node}
	}
	wait := func(d time.Duration) step { return step{kind: stepWait, wait: d} }
	loss := step{kind: stepRestart}
	failover := rng.IntN(2) == 0
	if failover {
		loss = step{kind: stepFailover}
	}
	var steps []step
	maybe := func(p float64, s ...step) {
		if rng.Float64() < p {
			steps = append(steps, s...)
		}
	}
	maybe(0.5, step{kind: stepConnect, node: x, user: rng.IntN(modelUsers)})
	maybe(0.9, fault(x), wait(2500*time.Millisecond))
	maybe(0.7, fault(y))
	if failover {
		maybe(0.9, step{kind: stepDetach})
	}
	maybe(0.9, step{kind: stepRestore, node: x}, wait(time.Second))
	maybe(0.35, fault(x))
	steps = append(steps, loss)
	back := []int{x, y}
	rng.Shuffle(len(back), func(i, j int) { back[i], back[j] = back[j], back[i] })
	for _, node := range back {
		maybe(0.5, wait(time.Second))
		steps = append(steps, step{kind: stepRestore, node: node})
	}
	return steps
}

func (st *genState) apply(s step) {
	switch {
	case s.kind == stepConnect:
		st.conns[s.node][s.user]++
	case s.kind == stepClose && st.conns[s.node][s.user] > 0:
		st.conns[s.node][s.user]--
	case s.kind.isLinkFault():
		st.fault[s.node] = true
	case s.kind == stepRestore:
		st.fault[s.node] = false
	case s.kind == stepHeal:
		clear(st.fault)
	case s.kind == stepDetach:
		st.attached = false
	case s.kind == stepFailover:
		st.attached = true
	}
}
