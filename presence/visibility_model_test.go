package presence

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// The visibility model: random histories of users who connect, close,
// open a second tab, reconnect, join, leave, set their mode and note (one
// that runs out too), watch others and hold heartbeat leases, on one Node
// stepped by hand. After every tick each live connection's picture, built
// from its frames alone, and after every operation each keyless answer
// (VisibleStatus, VisibleUsers, VisibleMembers), are compared with what
// the model says that viewer may know of each user. A failure prints its
// seed and the shortest history found that still fails.

var (
	visSteps = flag.Int("visibility.steps", 0, "operations in each history of TestVisibilityModel (0: 150)")
	visSeeds = flag.Int("visibility.seeds", 0, "histories of TestVisibilityModel (0: 20, or 3 under -short)")
	visSeed  = flag.Uint64("visibility.seed", 0, "run TestVisibilityModel for this seed only")
)

// visRegressions are histories that found a divergence once, each fixed.
var visRegressions = []struct {
	seed  uint64
	steps int
}{
	{1795891162838569890, 150}, // a user's first connection closed: the view lost its second
	{1795891289681480081, 300}, // a record changed while its user was out of a channel it left and rejoined in a tick
}

const (
	visUsers = 4
	visSlots = 4 // a lease lasts visSlots steps
)

var visChannels = []string{"c0", "c1"}

type visKind uint8

const (
	visConnect visKind = iota
	visClose
	visReconnect
	visJoin
	visLeave
	visMode
	visNote
	visFlash // a note that runs out
	visWatch
	visHeartbeat
	visTick
	visLapse // steps until every lease has run out
)

// A visOp is one operation of a history. conn names a connection by the
// index of the op that opened it; an op whose connection is not live when
// it runs (a shrunk history) is skipped.
type visOp struct {
	kind  visKind
	conn  int
	uid   int
	ch    int
	mode  string
	text  string // visNote: "" clears
	watch []int
	chans int // visHeartbeat: a bit per channel
}

func (o visOp) String() string {
	u := func(i int) string { return fmt.Sprintf("u%d", i) }
	switch o.kind {
	case visConnect:
		return fmt.Sprintf("connect #%d as %s in %s", o.conn, u(o.uid), visChannels[o.ch])
	case visClose:
		return fmt.Sprintf("close #%d", o.conn)
	case visReconnect:
		return fmt.Sprintf("reconnect #%d as #%d", o.uid, o.conn)
	case visJoin:
		return fmt.Sprintf("#%d joins %s", o.conn, visChannels[o.ch])
	case visLeave:
		return fmt.Sprintf("#%d leaves %s", o.conn, visChannels[o.ch])
	case visMode:
		return fmt.Sprintf("#%d sets mode %s", o.conn, o.mode)
	case visNote:
		return fmt.Sprintf("#%d sets note %q", o.conn, o.text)
	case visFlash:
		return fmt.Sprintf("#%d sets a note that runs out", o.conn)
	case visWatch:
		var ws []string
		for _, w := range o.watch {
			ws = append(ws, u(w))
		}
		return fmt.Sprintf("#%d watches %v", o.conn, ws)
	case visHeartbeat:
		return fmt.Sprintf("heartbeat %s, channels %02b", u(o.uid), o.chans)
	case visTick:
		return "tick"
	}
	return "lapse"
}

// visHistory draws a history of steps operations from seed.
func visHistory(seed uint64, steps int) []visOp {
	rng := rand.New(rand.NewPCG(seed, 0x5ee))
	var ops []visOp
	var live []int // the connections the history keeps open, by op index
	pick := func() int { return live[rng.IntN(len(live))] }
	for len(ops) < steps {
		i := len(ops)
		op := visOp{kind: visKind(rng.IntN(int(visLapse) + 1)), uid: rng.IntN(visUsers), ch: rng.IntN(len(visChannels))}
		if len(live) == 0 && op.kind <= visWatch {
			op.kind = visConnect
		}
		if op.kind == visLapse && rng.IntN(4) > 0 {
			op.kind = visTick // a lapse now and then: it steps visSlots times
		}
		switch op.kind {
		case visConnect:
			op.conn = i
			live = append(live, i)
		case visClose:
			op.conn = pick()
			live = slices.DeleteFunc(live, func(c int) bool { return c == op.conn })
		case visReconnect:
			op.uid = pick() // the connection it replaces
			live = slices.DeleteFunc(live, func(c int) bool { return c == op.uid })
			op.conn = i
			live = append(live, i)
		case visMode:
			op.conn = pick()
			op.mode = []string{protocol.ModeOnline, protocol.ModeDND, protocol.ModeInvisible, protocol.ModeInvisible}[rng.IntN(4)]
		case visNote:
			op.conn = pick()
			op.text = []string{"", "lunch", "meeting"}[rng.IntN(3)]
		case visWatch:
			op.conn = pick()
			for u := range visUsers {
				if rng.IntN(2) == 0 {
					op.watch = append(op.watch, u)
				}
			}
		case visHeartbeat:
			op.chans = rng.IntN(4)
		case visTick, visLapse:
		default:
			op.conn = pick()
		}
		ops = append(ops, op)
	}
	return ops
}

func TestVisibilityModel(t *testing.T) {
	steps := *visSteps
	if steps == 0 {
		steps = 150
	}
	seeds := *visSeeds
	if seeds == 0 {
		seeds = 20
		if testing.Short() {
			seeds = 3
		}
	}
	type run struct {
		seed  uint64
		steps int
	}
	var list []run
	for _, r := range visRegressions {
		list = append(list, run{r.seed, r.steps})
	}
	base := uint64(time.Now().UnixNano())
	for i := range seeds {
		list = append(list, run{base + uint64(i), steps})
	}
	if *visSeed != 0 {
		list = []run{{*visSeed, steps}}
	}
	t.Logf("%d regressions, then %d seeds from %d, %d operations each", len(visRegressions), seeds, base, steps)
	for _, r := range list {
		seed, ops := r.seed, visHistory(r.seed, r.steps)
		err := runVis(ops)
		if err == nil {
			continue
		}
		short, serr := shrinkVis(ops, err)
		var b strings.Builder
		for _, op := range short {
			fmt.Fprintf(&b, "\n  %v", op)
		}
		require.NoError(t, serr, "seed %d (-visibility.seed=%d -visibility.steps=%d): shortest failing history (%d of %d operations):%s", seed, seed, r.steps, len(short), len(ops), b.String())
	}
}

// shrinkVis returns the shortest history found, by dropping ever smaller
// runs of operations, that still fails, and its failure.
func shrinkVis(ops []visOp, err error) ([]visOp, error) {
	for n := len(ops) / 2; n >= 1; {
		cut := false
		for i := 0; i+n <= len(ops); {
			try := slices.Concat(ops[:i], ops[i+n:])
			if e := runVis(try); e != nil {
				ops, err, cut = try, e, true
				continue
			}
			i += n
		}
		if !cut {
			n /= 2
		}
	}
	return ops, err
}

// runVis runs a history on a fresh Node and returns the first divergence.
func runVis(ops []visOp) (err error) {
	n, nerr := New(Config{Slots: visSlots})
	if nerr != nil {
		return nerr
	}
	defer n.Close()
	m := &visModel{n: n, conns: map[int]*visConn{}, users: map[string]*visUser{}, leases: map[string]*visLease{}}
	for u := range visUsers {
		m.users[fmt.Sprintf("u%d", u)] = &visUser{}
	}
	for i, op := range ops {
		if err := m.do(op); err != nil {
			return fmt.Errorf("op %d (%v): %w", i, op, err)
		}
		if err := m.checkKeyless(); err != nil {
			return fmt.Errorf("after op %d (%v): keyless: %w", i, op, err)
		}
	}
	return nil
}

// errVisSkip marks an operation that does not apply to the state it finds.
var errVisSkip = errors.New("skipped")
