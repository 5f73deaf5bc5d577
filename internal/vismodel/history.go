// Package vismodel checks the visibility rule against a model: random
// histories of users who connect, close, open a second tab, reconnect,
// join, leave, set their mode and note (one that runs out too), watch
// others and hold heartbeat leases, on one or more presence.Nodes stepped
// by hand. After every tick each live connection's picture, built from its
// frames alone, and after every operation each keyless answer
// (VisibleStatus, VisibleUsers, VisibleMembers) of every node, are compared
// with what the model says that viewer may know of each user. Shrink finds
// the shortest history that still fails.
package vismodel

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/presenced/presenced/protocol"
)

// The shape of a history: its users are u0 to u3, its channels c0 and c1.
const (
	users = 4
	// Slots is the size of the Nodes' rings: a lease lasts Slots steps.
	Slots = 4
)

var channels = []string{"c0", "c1"}

// A Kind says what an Op does.
type Kind uint8

// The kinds of operations.
const (
	Connect Kind = iota
	Close
	Reconnect
	Join
	Leave
	Mode
	Note
	Flash // a note that runs out
	Watch
	Heartbeat
	Tick
	Lapse    // steps until every lease has run out
	HideJoin // turns invisible and at once joins a channel
)

// An Op is one operation of a history. Conn names a connection by the
// index of the op that opened it; an op whose connection is not live when
// it runs (a shrunk history) is skipped.
type Op struct {
	Kind  Kind
	Conn  int
	UID   int // Reconnect: the connection it replaces
	Ch    int
	Mode  string
	Text  string // Note: "" clears
	Watch []int
	Chans int // Heartbeat: a bit per channel
}

func (o Op) String() string {
	u := func(i int) string { return fmt.Sprintf("u%d", i) }
	switch o.Kind {
	case Connect:
		return fmt.Sprintf("connect #%d as %s in %s", o.Conn, u(o.UID), channels[o.Ch])
	case Close:
		return fmt.Sprintf("close #%d", o.Conn)
	case Reconnect:
		return fmt.Sprintf("reconnect #%d as #%d", o.UID, o.Conn)
	case Join:
		return fmt.Sprintf("#%d joins %s", o.Conn, channels[o.Ch])
	case Leave:
		return fmt.Sprintf("#%d leaves %s", o.Conn, channels[o.Ch])
	case Mode:
		return fmt.Sprintf("#%d sets mode %s", o.Conn, o.Mode)
	case Note:
		return fmt.Sprintf("#%d sets note %q", o.Conn, o.Text)
	case Flash:
		return fmt.Sprintf("#%d sets a note that runs out", o.Conn)
	case Watch:
		var ws []string
		for _, w := range o.Watch {
			ws = append(ws, u(w))
		}
		return fmt.Sprintf("#%d watches %v", o.Conn, ws)
	case Heartbeat:
		return fmt.Sprintf("heartbeat %s, channels %02b", u(o.UID), o.Chans)
	case Tick:
		return "tick"
	case HideJoin:
		return fmt.Sprintf("#%d turns invisible and joins %s", o.Conn, channels[o.Ch])
	}
	return "lapse"
}

// History draws a history of steps operations from seed; without leases,
// it has no heartbeats or lapses (their ticks are counted exactly), and
// without hideJoin no HideJoin.
func History(seed uint64, steps int, leases, hideJoin bool) []Op {
	rng := rand.New(rand.NewPCG(seed, 0x5ee))
	hide := rand.New(rand.NewPCG(seed, 0x41de)) // a stream of its own: the rest of a seed's history stays as it was
	var ops []Op
	var live []int // the connections the history keeps open, by op index
	pick := func() int { return live[rng.IntN(len(live))] }
	for len(ops) < steps {
		i := len(ops)
		op := Op{Kind: Kind(rng.IntN(int(Lapse) + 1)), UID: rng.IntN(users), Ch: rng.IntN(len(channels))}
		if len(live) == 0 && op.Kind <= Watch {
			op.Kind = Connect
		}
		if op.Kind == Lapse && rng.IntN(4) > 0 {
			op.Kind = Tick // a lapse now and then: it steps Slots times
		}
		if !leases && (op.Kind == Heartbeat || op.Kind == Lapse) {
			op.Kind = Tick
		}
		if op.Kind == Join && hide.IntN(3) == 0 && hideJoin {
			op.Kind = HideJoin
		}
		switch op.Kind {
		case Connect:
			op.Conn = i
			live = append(live, i)
		case Close:
			op.Conn = pick()
			live = slices.DeleteFunc(live, func(c int) bool { return c == op.Conn })
		case Reconnect:
			op.UID = pick()
			live = slices.DeleteFunc(live, func(c int) bool { return c == op.UID })
			op.Conn = i
			live = append(live, i)
		case Mode:
			op.Conn = pick()
			op.Mode = []string{protocol.ModeOnline, protocol.ModeDND, protocol.ModeInvisible, protocol.ModeInvisible}[rng.IntN(4)]
		case Note:
			op.Conn = pick()
			op.Text = []string{"", "lunch", "meeting"}[rng.IntN(3)]
		case Watch:
			op.Conn = pick()
			for u := range users {
				if rng.IntN(2) == 0 {
					op.Watch = append(op.Watch, u)
				}
			}
		case Heartbeat:
			op.Chans = rng.IntN(4)
		case Tick, Lapse:
		default:
			op.Conn = pick()
		}
		ops = append(ops, op)
	}
	return ops
}

// Shrink returns the shortest history found, by dropping ever smaller runs
// of operations, that run still fails, and its failure; err is ops's.
func Shrink(ops []Op, err error, run func([]Op) error) ([]Op, error) {
	for n := len(ops) / 2; n >= 1; {
		cut := false
		for i := 0; i+n <= len(ops); {
			try := slices.Concat(ops[:i], ops[i+n:])
			if e := run(try); e != nil {
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
