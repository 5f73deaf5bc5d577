package cluster

import (
	"errors"
	"strconv"
	"strings"
)

// lostCalls is what one shard must recall (see recall in the scripts): the
// numbers of the calls there whose replies were lost, as runs. A run lo..hi
// holds no number of a call of the shard that was answered, renewals
// aside, so every reply the shard kept for the node in it is a lost one,
// and the script finds them with one range read whatever the run's length:
// an outage costs one run per shard, not one number per failed call.
// Renewals are not noted: a renewal makes no edge, so it leaves nothing to
// recall, and an answered one leaves no reply with an edge inside a run.
type lostCalls struct {
	runs     []callRun
	answered int64 // the newest call of the shard answered, renewals aside
}

type callRun struct{ lo, hi int64 }

// maxLostRuns bounds a shard's runs. Runs only multiply when the call
// that asks for them fails while a later one to the same shard is
// answered, which a failing Redis does not do for long; the bound keeps
// that asking call a few dozen range reads at worst. A number dropped
// would lose its call's edges for good, so at the bound the shard gets only
// the call that asks (see runScripts) until one is answered.
const maxLostRuns = 64

// errLostRuns fails, unsent, a call that would make the shard's list grow
// past maxLostRuns.
var errLostRuns = errors.New("cluster: too many calls with lost replies in the shard: only the one asking for them is sent")

// note records the outcome of call v, the newest noted for the shard.
func (l *lostCalls) note(v int64, answered bool) {
	if answered {
		l.answered = max(l.answered, v)
		return
	}
	if n := len(l.runs); n > 0 && l.answered < l.runs[n-1].hi && v > l.runs[n-1].hi {
		l.runs[n-1].hi = v
		return
	}
	l.runs = append(l.runs, callRun{v, v})
}

// arg lists the runs for the script: "v" or "lo-hi", comma-separated.
func (l *lostCalls) arg() string {
	var b strings.Builder
	for i, r := range l.runs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(r.lo, 10))
		if r.hi != r.lo {
			b.WriteByte('-')
			b.WriteString(strconv.FormatInt(r.hi, 10))
		}
	}
	return b.String()
}
