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
// cmd/loadgen re-executes itself; tests may run RunWorker in a goroutine.
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
	HoldMS            int64            `json:"hold_ms"`         // from the end of the ramp (all dials done) to the deadline
	HoldKeepalives    int64            `json:"hold_keepalives"` // keepalives sent during the hold
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

type workerState struct {
	last  report
	final *report
}

// Run executes cfg and returns its Summary. The error is about running the
// load (bad config, a worker that could not start), not about its outcome:
// check Summary.OK.
func (co *Coordinator) Run(ctx context.Context, cfg Config) (Summary, error) {
	log := co.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := cfg.withDefaults(ctx)
	if err != nil {
		return Summary{}, fmt.Errorf("loadgen config: %w", err)
	}
	start := time.Now().Add(startDelay)
	specs := plan(cfg, start)

	var (
		mu      sync.Mutex
		states  = make([]workerState, len(specs))
		ramped  = make(chan int, len(specs))
		werrs   []string
		readers sync.WaitGroup
		waits   []func() error
	)
	for i, spec := range specs {
		rc, wait, err := co.Launch(ctx, spec, len(specs))
		if err != nil {
			for _, w := range waits {
				_ = w()
			}
			return Summary{}, fmt.Errorf("start worker %d: %w", i, err)
		}
		waits = append(waits, wait)
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer rc.Close()
			sc := bufio.NewScanner(rc)
			sc.Buffer(make([]byte, 64<<10), 64<<20)
			for sc.Scan() {
				var r report
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					mu.Lock()
					werrs = append(werrs, fmt.Sprintf("worker %d: bad report: %v", i, err))
					mu.Unlock()
					continue
				}
				mu.Lock()
				states[i].last = r
				if r.Kind == kindFinal {
					states[i].final = &r
				}
				mu.Unlock()
				if r.Kind == kindRamped {
					ramped <- i
				}
			}
			if err := sc.Err(); err != nil {
				mu.Lock()
				werrs = append(werrs, fmt.Sprintf("worker %d: read reports: %v", i, err))
				mu.Unlock()
			}
		}()
	}

	sum := func() counters {
		mu.Lock()
		defer mu.Unlock()
		var t counters
		for _, s := range states {
			t = t.add(s.last.counters)
		}
		return t
	}

	deadline := start.Add(cfg.Duration)
	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		co.progress(start, sum, stopProgress)
	}()

	// The hold starts when every worker has finished dialing.
	var holdStart time.Time
	var holdKA int64
	var before procSample
	var haveBefore bool
	waitRamp := time.NewTimer(time.Until(deadline))
	for n := 0; n < len(specs); {
		select {
		case <-ramped:
			n++
			continue
		case <-waitRamp.C:
		case <-ctx.Done():
		}
		break
	}
	waitRamp.Stop()
	if time.Now().Before(deadline) && ctx.Err() == nil {
		holdStart = time.Now()
		holdKA = sum().Keepalives
		if cfg.ServerPID > 0 {
			if before, err = sampleProc(cfg.ServerPID); err != nil {
				log.Warn("sample server", "err", err)
			} else {
				haveBefore = true
			}
		}
	}

	var after procSample
	var haveAfter bool
	select {
	case <-time.After(time.Until(deadline)):
	case <-ctx.Done():
	}
	holdEnd := time.Now()
	if haveBefore {
		if after, err = sampleProc(cfg.ServerPID); err != nil {
			log.Warn("sample server", "err", err)
		} else {
			haveAfter = true
		}
	}

	readers.Wait()
	for i, w := range waits {
		if err := w(); err != nil {
			werrs = append(werrs, fmt.Sprintf("worker %d: %v", i, err))
		}
	}
	close(stopProgress)
	<-progressDone

	s := Summary{
		Conns: cfg.Conns, Workers: len(specs), Sources: cfg.Sources,
		CloseCodes: map[string]int{}, FrameTypes: map[string]int64{},
	}
	var detect []float64
	var perClient []int64
	var total counters
	for i, st := range states {
		if st.final == nil {
			werrs = append(werrs, fmt.Sprintf("worker %d: no final report", i))
			total = total.add(st.last.counters)
			continue
		}
		f := st.final
		if f.Err != "" {
			werrs = append(werrs, fmt.Sprintf("worker %d: %s", i, f.Err))
		}
		total = total.add(f.counters)
		s.TimeoutMS = max(s.TimeoutMS, f.TimeoutMS)
		s.Silent += f.Silent
		s.SilentClosed += f.SilentClosed
		s.SilentClosedOther += f.SilentOther
		s.FalseClosed += f.FalseClosed
		detect = append(detect, f.DetectMS...)
		for k, v := range f.CloseCodes {
			s.CloseCodes[k] += v
		}
		for k, v := range f.FrameTypes {
			s.FrameTypes[k] += v
		}
		perClient = append(perClient, f.PerClient...)
	}
	s.Connected = total.Connected
	s.FailedDials = total.FailedDials
	s.Keepalives = total.Keepalives
	s.FramesReceived = total.Received
	s.ServerPings = total.PingsIn
	s.FramesPerClient = frameStats(perClient)
	s.SilentUnclosed = s.Silent - s.SilentClosed - s.SilentClosedOther
	s.DetectP50MS, s.DetectP99MS, s.DetectMaxMS = percentile(detect, 50), percentile(detect, 99), percentile(detect, 100)
	if !holdStart.IsZero() {
		s.HoldMS = holdEnd.Sub(holdStart).Milliseconds()
		s.HoldKeepalives = total.Keepalives - holdKA
	}
	if haveBefore && haveAfter {
		s.ServerCPUHoldS = (after.CPU - before.CPU).Seconds()
		s.ServerRSSHoldKB = []int64{before.RSSKB, after.RSSKB}
	}
	sort.Strings(werrs)
	s.WorkerErrors = werrs
	return s, nil
}

func (a counters) add(b counters) counters {
	return counters{
		Dialed: a.Dialed + b.Dialed, Connected: a.Connected + b.Connected,
		FailedDials: a.FailedDials + b.FailedDials, Open: a.Open + b.Open,
		Closed: a.Closed + b.Closed, Errors: a.Errors + b.Errors,
		Keepalives: a.Keepalives + b.Keepalives, Received: a.Received + b.Received,
		PingsIn: a.PingsIn + b.PingsIn,
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
