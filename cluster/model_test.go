package cluster

import (
	"context"
	"errors"
	goflag "flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	modelSeed      = goflag.Uint64("model.seed", 1, "TestModelEdgesAlternate: the first seed")
	modelSeeds     = goflag.Int("model.seeds", 5, "TestModelEdgesAlternate: how many seeds, from -model.seed on")
	modelSteps     = goflag.Int("model.steps", 16, "TestModelEdgesAlternate: steps per seed")
	modelShrink    = goflag.Duration("model.shrink", 2*time.Minute, "TestModelEdgesAlternate: how long to look for a shorter failing history (0: not at all)")
	modelHistory   = goflag.String("model.history", "", "TestModelEdgesAlternate: run this history (as a failure prints it) instead of drawn ones")
	modelMotifs    = goflag.Float64("model.motifs", 2, "TestModelEdgesAlternate: the weight of fault motifs against single steps, whose weights add up to about 17 (0: single steps alone)")
	modelKeepGoing = goflag.Bool("model.keepgoing", false, "TestModelEdgesAlternate: go on with the other seeds after a failure, shrinking none")
)

// The model test drives 2 or 3 nodes through a random history of
// connections opening and closing, time passing, links cut, stalled,
// hung or muted and restored, Redis restarted empty and failed over to a
// replica that missed the last writes. Whatever happens, every user's
// online and offline edges, over all the nodes that made them, alternate,
// starting with online, each once; and once every link is whole and the
// cluster settled, each user's last edge and Redis's view say what is
// true: online while some node holds a connection of it. A failure prints
// its seed and the shortest failing history found by running it again
// with steps left out.
func TestModelEdgesAlternate(t *testing.T) {
	if *modelHistory != "" {
		nodes, steps, err := parseHistory(*modelHistory)
		if err != nil {
			t.Fatalf("-model.history: %v", err)
		}
		if _, _, err := runModel(t, nodes, steps); err != nil {
			t.Errorf("%v\nhistory: %s", err, historyText(nodes, steps))
		}
		return
	}
	for i := range *modelSeeds {
		seed := *modelSeed + uint64(i)
		rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
		nodes := 2 + rng.IntN(2)
		steps := generate(rng, nodes, *modelSteps, *modelMotifs)
		began := time.Now()
		at, replayed, err := runModel(t, nodes, steps)
		if err == nil {
			t.Logf("seed %d: %d nodes, %d steps: every edge alternates, the log too, %s (%v)", seed, nodes, len(steps), replayed, time.Since(began).Round(100*time.Millisecond))
			continue
		}
		steps = steps[:min(at+1, len(steps))]
		t.Logf("seed %d: fails after step %d of %d (%v): %v", seed, at+1, *modelSteps, time.Since(began).Round(100*time.Millisecond), err)
		if *modelKeepGoing {
			t.Errorf("seed %d: %v\nhistory: -model.history '%s'", seed, err, historyText(nodes, steps))
			continue
		}
		short, runs, shortErr := shrinkHistory(t, nodes, steps, err, *modelShrink)
		t.Fatalf("seed %d: %v\nshortest failing history found (%d steps of %d, %d runs to shrink): %v\n-model.history '%s'",
			seed, err, len(short), len(steps), runs, shortErr, historyText(nodes, short))
	}
}

// shrinkHistory looks, within budget, for a shorter history that fails
// too, leaving out chunks of steps, then single ones (delta debugging);
// the cluster's timing varies, so a history counts as failing if one run
// of it failed. It returns the shortest found, the runs made, and its
// failure.
func shrinkHistory(t *testing.T, nodes int, steps []step, failure error, budget time.Duration) ([]step, int, error) {
	deadline := time.Now().Add(budget)
	runs := 0
	n := 2
	for len(steps) > 1 && time.Now().Before(deadline) {
		chunk := (len(steps) + n - 1) / n
		shorter := false
		for i := 0; i < len(steps) && time.Now().Before(deadline); i += chunk {
			cand := slices.Concat(steps[:i], steps[min(i+chunk, len(steps)):])
			runs++
			at, _, err := runModel(t, nodes, cand)
			if err == nil {
				continue
			}
			steps, failure = cand[:min(at+1, len(cand))], err
			t.Logf("shrinking: %d steps fail too: %s", len(steps), historyText(nodes, steps))
			n, shorter = max(n-1, 2), true
			break
		}
		if !shorter {
			if n >= len(steps) {
				break
			}
			n = min(2*n, len(steps))
		}
	}
	return steps, runs, failure
}

// modelRun is one run of a history on a cluster of its own.
type modelRun struct {
	t               *testing.T
	master, replica *redisServer
	attached        bool // the replica follows the master
	proxies         []*proxy
	nodes           []*node
	fault           []stepKind // per node: the link's fault, or -1
	conns           []map[string]int
	users           []string
	lost            bool        // Redis restarted empty, or failed over
	snaps           []modelSnap // taken whenever the cluster settled
	replayed        string      // what checkLog read
}

const noFault stepKind = -1

// runModel runs steps, then heals every link and checks the settled
// cluster twice, some claim rounds apart. It returns the step after which
// a check failed (len(steps) for the last checks) and the failure, or
// what the check of the log replayed.
func runModel(t *testing.T, nodes int, steps []step) (int, string, error) {
	m := &modelRun{t: t, master: startRedis(t), replica: startRedis(t), attached: true, users: userIDs("u", modelUsers)}
	defer m.close()
	replicate(t, m.replica, m.master)
	for i := range nodes {
		p := startProxy(t, m.master.addr())
		m.proxies = append(m.proxies, p)
		m.nodes = append(m.nodes, startNode(t, testConfig(p.client(t), nodeName(i))))
		m.fault = append(m.fault, noFault)
		m.conns = append(m.conns, map[string]int{})
	}
	for i, s := range steps {
		m.do(s)
		if slices.ContainsFunc(m.fault, func(k stepKind) bool { return k != noFault }) {
			continue // a broken link: only once it is whole can the cluster settle
		}
		if err := m.settle(); err != nil {
			return i, "", fmt.Errorf("after step %d, %s: %w", i+1, s, err)
		}
		m.snapshot()
	}
	m.do(step{kind: stepHeal})
	if err := m.settle(); err != nil {
		return len(steps), "", fmt.Errorf("once every link was whole: %w", err)
	}
	if err := m.snapshotOnce(); err != nil {
		return len(steps), "", err
	}
	// A few claim and renewal rounds later, nothing more.
	time.Sleep(3 * testTimeout)
	if err := m.settle(); err != nil {
		return len(steps), "", fmt.Errorf("some claim rounds after every link was whole: %w", err)
	}
	if err := m.checkLog(); err != nil {
		return len(steps), "", fmt.Errorf("the log of edges: %w", err)
	}
	return len(steps), m.replayed, nil
}

func (m *modelRun) close() {
	for _, n := range m.nodes {
		n.crash()
		n.stopRun()
	}
	for _, p := range m.proxies {
		_ = p.l.Close()
		p.cut(true)
	}
	m.master.kill()
	m.replica.kill()
}

func (m *modelRun) do(s step) {
	switch s.kind {
	case stepConnect, stepClose:
		// A connection's user record and memberships change as a Node
		// changes them: the user first when it opens, last when it closes.
		uid, n := m.users[s.user], m.nodes[s.node]
		if s.kind == stepClose {
			if m.conns[s.node][uid] == 0 {
				return // a shrunk history may close what it never opened
			}
			m.conns[s.node][uid]--
			for _, ch := range modelChannels(s.user) {
				n.SetMember(ch, uid, m.conns[s.node][uid], false)
			}
			n.SetUser(uid, m.conns[s.node][uid], 0)
			return
		}
		m.conns[s.node][uid]++
		n.SetUser(uid, m.conns[s.node][uid], 0)
		for _, ch := range modelChannels(s.user) {
			n.SetMember(ch, uid, m.conns[s.node][uid], false)
		}
	case stepWait:
		time.Sleep(s.wait)
	case stepCut, stepStall, stepSwallow, stepMute:
		m.restore(s.node)
		m.fault[s.node] = s.kind
		p := m.proxies[s.node]
		switch s.kind {
		case stepCut:
			p.cut(true)
		case stepStall:
			p.stall(true)
		case stepSwallow:
			p.swallow(true)
		default:
			p.mute(true)
		}
	case stepRestore:
		m.restore(s.node)
	case stepHeal:
		for i := range m.nodes {
			m.restore(i)
		}
	case stepRestart:
		m.lost = true
		m.master.restart()
	case stepDetach:
		m.detach()
	case stepFailover:
		m.lost = true
		m.detach()
		for _, p := range m.proxies {
			p.retarget(m.replica.addr())
		}
		// The old master comes back empty, as the new one's replica.
		m.master.restart()
		m.master, m.replica = m.replica, m.master
		replicate(m.t, m.replica, m.master)
		m.attached = true
	}
}

func (m *modelRun) restore(i int) {
	p := m.proxies[i]
	switch m.fault[i] {
	case stepCut:
		p.cut(false)
	case stepStall:
		p.stall(false)
	case stepSwallow:
		p.swallow(false)
	case stepMute:
		p.mute(false)
	}
	m.fault[i] = noFault
}

func (m *modelRun) detach() {
	if !m.attached {
		return
	}
	rc := redis.NewClient(&redis.Options{Addr: m.replica.addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	defer rc.Close()
	if err := rc.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		m.t.Fatalf("detach the replica: %v", err)
	}
	m.attached = false
}

// settle waits until the cluster says what is true (see check). Edges
// whose replies were lost come with their node's next call, so a history
// may look wrong for a moment: it fails if it stays wrong, for testWait,
// or if the cluster does not settle within twice that.
func (m *modelRun) settle() error {
	deadline := time.Now().Add(2 * testWait)
	var wrongSince time.Time
	for {
		wrong, unsettled := m.check()
		switch {
		case wrong == "" && unsettled == "":
			return nil
		case wrong != "" && wrongSince.IsZero():
			wrongSince = time.Now()
		case wrong == "":
			wrongSince = time.Time{}
		}
		if wrong != "" && time.Since(wrongSince) > testWait {
			return errors.New(wrong)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled after %v: %s", 2*testWait, strings.TrimSpace(wrong+" "+unsettled))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check returns what is wrong with the users' edges (a history that
// cannot be), and what is not settled yet (a last edge or Redis's view
// that is not what is true).
func (m *modelRun) check() (wrong, unsettled string) {
	var wrongs, diffs []string
	var online []string
	for _, uid := range m.users {
		total := 0
		for _, c := range m.conns {
			total += c[uid]
		}
		if total > 0 {
			online = append(online, uid)
		}
		on, w := alternation(mergedEdges(m.nodes, uid))
		switch {
		case w != "":
			wrongs = append(wrongs, uid+" "+w)
		case on != (total > 0):
			diffs = append(diffs, fmt.Sprintf("%s's edges end %s, it holds %d connections", uid, map[bool]string{true: "online", false: "offline"}[on], total))
		}
	}
	if len(wrongs) > 0 || len(diffs) > 0 {
		return strings.Join(wrongs, "; "), strings.Join(diffs, "; ")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, ids, err := m.nodes[0].Users(ctx, modelUsers)
	if err != nil {
		return "", "Users: " + err.Error()
	}
	if n != len(online) || !slices.Equal(ids, online) {
		return "", fmt.Sprintf("redis has %d online %v, the truth %v", n, ids, online)
	}
	for _, uid := range m.users {
		total := 0
		for _, c := range m.conns {
			total += c[uid]
		}
		got, err := connsOf(ctx, m.nodes[0], uid)
		if err != nil {
			return "", "Status: " + err.Error()
		}
		if got != total {
			return "", "redis has " + strconv.Itoa(got) + " connections of " + uid + ", the truth " + strconv.Itoa(total)
		}
	}
	return "", ""
}
