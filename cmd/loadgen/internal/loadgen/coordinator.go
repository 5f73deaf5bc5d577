package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Launcher starts one worker with spec and returns the stream of its JSON
// reports (RunWorker's out) and a function that waits for the worker to end.
// cmd/loadgen re-executes itself; a Launcher may as well run RunWorker in a
// goroutine of this process.
type Launcher func(ctx context.Context, spec Spec, workers int) (reports io.ReadCloser, wait func() error, err error)

// Summary is the outcome of a run; cmd/loadgen prints it as one JSON line.
type Summary struct {
	Conns             int              `json:"conns"`
	Connected         int64            `json:"connected"`
	FailedDials       int64            `json:"failed_dials"`
	Silent            int              `json:"silent"`
	SilentClosed      int              `json:"silent_closed"`
	FalseClosed       int              `json:"false_closed"`
	DetectP50MS       float64          `json:"detect_p50_ms"`
	DetectP99MS       float64          `json:"detect_p99_ms"`
	DetectMaxMS       float64          `json:"detect_max_ms"`
	TimeoutMS         int64            `json:"timeout_ms"`
	SilentUnclosed    int              `json:"silent_unclosed"`     // silent clients still open at the end
	SilentClosedOther int              `json:"silent_closed_other"` // silent clients that ended without 4408
	CloseCodes        map[string]int   `json:"close_codes"`         // ends before the deadline, by close code ("eof": no close frame)
	Workers           int              `json:"workers"`
	Sources           int              `json:"sources"`
	Keepalives        int64            `json:"keepalives_sent"`   // pong replies and app pings, whole run
	FramesReceived    int64            `json:"frames_received"`   // data frames received by all clients until the deadline
	FrameTypes        map[string]int64 `json:"frames_by_type"`    // the same by "type" (see frameTypes)
	FramesPerClient   FrameStats       `json:"frames_per_client"` // spread of data frames received over the clients that connected
	ServerPings       int64            `json:"server_pings"`
	LatePings         int64            `json:"late_pings,omitempty"` // stream pings sent over 500 ms past their time: the generator fell behind
	SlowPings         int64            `json:"slow_pings,omitempty"` // stream pings answered over 500 ms after they were sent: the round trip (server or generator) did
	HoldMS            int64            `json:"hold_ms"`              // from the end of the ramp (all dials done) to the deadline
	HoldKeepalives    int64            `json:"hold_keepalives"`      // keepalives sent during the hold
	ServerCPUHoldS    float64          `json:"server_cpu_hold_s,omitempty"`
	ServerRSSHoldKB   []int64          `json:"server_rss_kb_hold,omitempty"` // at the start and the end of the hold
	WorkerErrors      []string         `json:"worker_errors,omitempty"`
}

// FrameStats is the spread of frames received per client.
type FrameStats struct {
	Clients int     `json:"clients"`
	Min     int64   `json:"min"`
	P50     int64   `json:"p50"`
	P99     int64   `json:"p99"`
	Max     int64   `json:"max"`
	Mean    float64 `json:"mean"`
}

func frameStats(xs []int64) FrameStats {
	if len(xs) == 0 {
		return FrameStats{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum int64
	for _, x := range s {
		sum += x
	}
	rank := func(p float64) int64 {
		r := int(math.Ceil(p / 100 * float64(len(s))))
		return s[min(max(r, 1), len(s))-1]
	}
	return FrameStats{
		Clients: len(s), Min: s[0], P50: rank(50), P99: rank(99), Max: s[len(s)-1],
		Mean: math.Round(float64(sum)/float64(len(s))*10) / 10,
	}
}

// OK reports whether the run met its contract: no live client was closed and
// every silent client was closed with 4408.
func (s Summary) OK() bool {
	return s.FalseClosed == 0 && s.SilentClosed == s.Silent && len(s.WorkerErrors) == 0
}

// Coordinator runs a Config over workers.
type Coordinator struct {
	Launch   Launcher
	Progress io.Writer // one line per second; nil: none
	Log      *slog.Logger
}

// Run executes cfg and returns its Summary. The error is about running the
// load (bad config, a worker that could not start), not about its outcome:
// check Summary.OK.
func (co *Coordinator) Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg, err := cfg.withDefaults(ctx)
	if err != nil {
		return Summary{}, fmt.Errorf("loadgen config: %w", err)
	}
	start := time.Now().Add(startDelay)
	specs := plan(cfg, start)
	f, err := co.launch(ctx, specs)
	if err != nil {
		return Summary{}, err
	}

	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		co.progress(start, f.sum, stopProgress)
	}()

	h := co.hold(ctx, f, cfg.ServerPID, start.Add(cfg.Duration))
	f.wait()
	close(stopProgress)
	<-progressDone
	return f.summarize(cfg, h), nil
}

// logger is co.Log, or a logger that drops everything.
func (co *Coordinator) logger() *slog.Logger {
	if co.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return co.Log
}

// workerState is what one worker has reported so far.
type workerState struct {
	last  report
	final *report
}

// fleet is the workers of one run and what they have reported.
type fleet struct {
	ramped  chan int // the index of each worker that has finished dialing
	readers sync.WaitGroup
	waits   []func() error

	mu     sync.Mutex
	states []workerState
	errs   []string
}

// launch starts a worker for each of specs and reads its reports in the
// background. If one cannot start, it waits for those already started, so
// that none outlives the run.
func (co *Coordinator) launch(ctx context.Context, specs []Spec) (*fleet, error) {
	f := &fleet{ramped: make(chan int, len(specs)), states: make([]workerState, len(specs))}
	for i, spec := range specs {
		rc, wait, err := co.Launch(ctx, spec, len(specs))
		if err != nil {
			for _, w := range f.waits {
				_ = w()
			}
			return nil, fmt.Errorf("start worker %d: %w", i, err)
		}
		f.waits = append(f.waits, wait)
		f.readers.Go(func() { f.read(i, rc) })
	}
	return f, nil
}

// read records the reports of worker i from rc until rc ends.
func (f *fleet) read(i int, rc io.ReadCloser) {
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var r report
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			f.addErrf("worker %d: bad report: %v", i, err)
			continue
		}
		f.mu.Lock()
		f.states[i].last = r
		if r.Kind == kindFinal {
			f.states[i].final = &r
		}
		f.mu.Unlock()
		if r.Kind == kindRamped {
			f.ramped <- i
		}
	}
	if err := sc.Err(); err != nil {
		f.addErrf("worker %d: read reports: %v", i, err)
	}
}

// addErrf records a problem with a worker for Summary.WorkerErrors.
func (f *fleet) addErrf(format string, args ...any) {
	f.mu.Lock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// sum adds up the latest counters of every worker.
func (f *fleet) sum() counters {
	f.mu.Lock()
	defer f.mu.Unlock()
	var t counters
	for _, s := range f.states {
		t = t.add(s.last.counters)
	}
	return t
}

// wait returns once every worker has ended and all its reports are read.
func (f *fleet) wait() {
	f.readers.Wait()
	for i, w := range f.waits {
		if err := w(); err != nil {
			f.addErrf("worker %d: %v", i, err)
		}
	}
}

// hold is what was measured from the end of the ramp to the deadline.
type hold struct {
	start, end    time.Time // start is zero if the ramp did not end in time
	keepalives    int64     // keepalives sent before the start
	before, after procSample
	sampled       bool // before and after are both of the server
}

// hold waits for every worker to finish dialing, then for the deadline, and
// measures the time in between: the steady state, without the dials' cost.
func (co *Coordinator) hold(ctx context.Context, f *fleet, serverPID int, deadline time.Time) hold {
	log := co.logger()
	var h hold
	haveBefore := false
	if waitRamp(ctx, f.ramped, len(f.states), deadline) {
		h.start = time.Now()
		h.keepalives = f.sum().Keepalives
		if serverPID > 0 {
			var err error
			if h.before, err = sampleProc(serverPID); err != nil {
				log.Warn("sample server", "err", err)
			} else {
				haveBefore = true
			}
		}
	}
	select {
	case <-time.After(time.Until(deadline)):
	case <-ctx.Done():
	}
	h.end = time.Now()
	if haveBefore {
		var err error
		if h.after, err = sampleProc(serverPID); err != nil {
			log.Warn("sample server", "err", err)
		} else {
			h.sampled = true
		}
	}
	return h
}

// waitRamp waits until n workers have reported on ramped, and reports
// whether that happened before the deadline with ctx still live.
func waitRamp(ctx context.Context, ramped <-chan int, n int, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for range n {
		select {
		case <-ramped:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return time.Now().Before(deadline) && ctx.Err() == nil
}

// summarize adds up the final reports of the workers, which have all ended,
// and the hold h.
func (f *fleet) summarize(cfg Config, h hold) Summary {
	s := Summary{
		Conns: cfg.Conns, Workers: len(f.states), Sources: cfg.Sources,
		CloseCodes: map[string]int{}, FrameTypes: map[string]int64{},
	}
	errs := slices.Clone(f.errs)
	var detect []float64
	var perClient []int64
	var total counters
	for i, st := range f.states {
		if st.final == nil {
			errs = append(errs, fmt.Sprintf("worker %d: no final report", i))
			total = total.add(st.last.counters)
			continue
		}
		r := st.final
		if r.Err != "" {
			errs = append(errs, fmt.Sprintf("worker %d: %s", i, r.Err))
		}
		total = total.add(r.counters)
		s.TimeoutMS = max(s.TimeoutMS, r.TimeoutMS)
		s.Silent += r.Silent
		s.SilentClosed += r.SilentClosed
		s.SilentClosedOther += r.SilentOther
		s.FalseClosed += r.FalseClosed
		detect = append(detect, r.DetectMS...)
		for k, v := range r.CloseCodes {
			s.CloseCodes[k] += v
		}
		for k, v := range r.FrameTypes {
			s.FrameTypes[k] += v
		}
		perClient = append(perClient, r.PerClient...)
	}
	s.Connected = total.Connected
	s.FailedDials = total.FailedDials
	s.Keepalives = total.Keepalives
	s.FramesReceived = total.Received
	s.ServerPings = total.PingsIn
	s.LatePings, s.SlowPings = total.LatePings, total.SlowPings
	s.FramesPerClient = frameStats(perClient)
	s.SilentUnclosed = s.Silent - s.SilentClosed - s.SilentClosedOther
	s.DetectP50MS, s.DetectP99MS, s.DetectMaxMS = percentile(detect, 50), percentile(detect, 99), percentile(detect, 100)
	if !h.start.IsZero() {
		s.HoldMS = h.end.Sub(h.start).Milliseconds()
		s.HoldKeepalives = total.Keepalives - h.keepalives
	}
	if h.sampled {
		s.ServerCPUHoldS = (h.after.CPU - h.before.CPU).Seconds()
		s.ServerRSSHoldKB = []int64{h.before.RSSKB, h.after.RSSKB}
	}
	sort.Strings(errs)
	s.WorkerErrors = errs
	return s
}

func (a counters) add(b counters) counters {
	return counters{
		Dialed: a.Dialed + b.Dialed, Connected: a.Connected + b.Connected,
		FailedDials: a.FailedDials + b.FailedDials, Open: a.Open + b.Open,
		Closed: a.Closed + b.Closed, Errors: a.Errors + b.Errors,
		Keepalives: a.Keepalives + b.Keepalives, Received: a.Received + b.Received,
		PingsIn: a.PingsIn + b.PingsIn, LatePings: a.LatePings + b.LatePings, SlowPings: a.SlowPings + b.SlowPings,
	}
}

// progress prints one line per second with rates over the last second.
func (co *Coordinator) progress(start time.Time, sum func() counters, stop <-chan struct{}) {
	if co.Progress == nil {
		<-stop
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var prev counters
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			c := sum()
			var b strings.Builder
			fmt.Fprintf(&b, "t=%-6s open=%d connected/s=%d closed/s=%d errors/s=%d keepalives/s=%d frames/s=%d (failed dials %d)\n",
				strconv.Itoa(int(math.Round(now.Sub(start).Seconds())))+"s", c.Open,
				c.Connected-prev.Connected, c.Closed-prev.Closed, c.Errors-prev.Errors,
				c.Keepalives-prev.Keepalives, c.Received-prev.Received, c.FailedDials)
			_, _ = io.WriteString(co.Progress, b.String())
			prev = c
		}
	}
}

// percentile returns the nearest-rank p-th percentile of xs (0 if empty).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return math.Round(s[rank-1]*10) / 10
}
