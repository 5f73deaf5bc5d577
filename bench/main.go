// Command bench measures this repository's tracker side by side with the
// floor of any keepalive and with the usual ways of expiring idle sessions in
// Go, in one process, and prints the figures as markdown tables.
//
//	cd bench && go run .
//
// Progress goes to stderr, the tables to stdout. It exits non-zero if a
// subject failed its checks (a step that expired the wrong number of keys).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"
)

// procs is GOMAXPROCS during the run, and so the goroutines of the parallel
// keepalive benchmark.
const procs = 2

func main() {
	testing.Init() // registers test.benchtime, which the harness sets per benchmark
	o := options{Progress: os.Stderr}
	flag.IntVar(&o.Keys, "keys", 1_000_000, "distinct keys")
	flag.IntVar(&o.Period, "period", 31, "steps per timeout: ring slots, and chunks the keys are spread over")
	flag.DurationVar(&o.Tick, "tick", time.Minute, "wall time of a step for the peers that run on the clock; "+
		"the default keeps their timeout (period-1 ticks) from firing during the run")
	flag.StringVar(&o.BenchTime, "benchtime", "1s", "run time of each keepalive benchmark (a duration, or Nx)")
	flag.IntVar(&o.Rounds, "rounds", 5, "times each keepalive benchmark runs; the table shows the median and the range")
	flag.IntVar(&o.StepIters, "steps", 29, "timed steps per step benchmark, at most -period minus 2")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed of the random key order")
	only := flag.String("only", "", "measure only subjects whose name contains this")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if o.Keys < o.Period || o.Period < 3 || o.StepIters < 1 || o.StepIters > o.Period-2 || o.Rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: need -keys >= -period >= 3, 1 <= -steps <= -period minus 2 and -rounds >= 1")
		os.Exit(2)
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: creating the CPU profile: %v\n", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench: starting the CPU profile: %v\n", err)
			os.Exit(1)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}

	start := time.Now()
	results := run(o, *only)
	writeReport(os.Stdout, o, results, time.Since(start))
	for _, r := range results {
		if r.Err != nil {
			pprof.StopCPUProfile()
			os.Exit(1)
		}
	}
}

// run measures every subject (or those whose name contains only) with one
// shared workload, one subject after another: each is dropped before the
// next is built, because testing.Benchmark collects garbage before every
// run and the cost of that grows with every subject kept alive.
func run(o options, only string) []result {
	// Exactly two Ps, whatever the machine: RunParallel starts one goroutine
	// per P, and importing go-zero has already set GOMAXPROCS from the
	// cgroup's CPU quota (its core/sysx init runs automaxprocs).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	w := newWorkload(o)
	var results []result
	for _, im := range impls {
		if only != "" && !strings.Contains(im.Name, only) {
			continue
		}
		ss := prepare(im, w, o)
		for range o.Rounds {
			if ss.res.Err == nil {
				ss.keepaliveRound(w, o)
			}
		}
		results = append(results, ss.finish())
	}
	return results
}

func writeReport(out io.Writer, o options, results []result, took time.Duration) {
	w := bufio.NewWriter(out)
	defer w.Flush()
	fmt.Fprintf(w, "%d string keys touched in a random order; %s %s/%s, %d CPUs, GOMAXPROCS %d, %s; run took %s.\n\n",
		o.Keys, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), procs, cpuModel(), took.Round(time.Second))
	fmt.Fprintf(w, "Timeout: %d steps. Peers that run on the wall clock (timers, RussellLuo) have a %v tick, so a %v timeout: none fires mid-run (their keepalive path does not depend on it). Keepalive cells: median of %d rounds of %s (fastest–slowest round), ns per keepalive; at 2 goroutines, wall time divided by all keepalives of both.\n\n",
		o.Period-1, o.Tick, time.Duration(o.Period-1)*o.Tick, o.Rounds, o.BenchTime)
	perStep := o.Keys / o.Period
	fmt.Fprintf(w, "| implementation | keepalive, 1 goroutine | keepalive, 2 goroutines | allocs per keepalive | bytes per key | step: 1/%d of keys (%d) expire | step: 1/%d of keys (%d) re-checked, none expire |\n",
		o.Period, perStep, o.Period, perStep)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(w, "| %s | failed: %v | | | | | |\n", r.Impl.Name, r.Err)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f | %s | %s |\n", r.Impl.Name,
			keepaliveCell(r.Touch1), keepaliveCell(r.Touch2), allocs(r.Touch1.median(), r.Touch2.median()), r.BytesPerKey,
			stepCell(r.StepExpire), stepCell(r.StepRecheck))
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "- %s: %s.", r.Impl.Name, r.Impl.Notes)
		if r.Fired > 0 {
			fmt.Fprintf(w, " **%d keys expired while keepalives were measured: its keepalive figures include that work.**", r.Fired)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	writeTargets(w, results)
}

// writeTargets checks the tracker against its targets: Touch within 1.25x of
// the floor, at least 2.5x faster than a map of time.AfterFunc timers (one
// mutex or 64 shards), 0 allocations per Touch and at most 64 bytes per key.
func writeTargets(w io.Writer, results []result) {
	find := func(prefix string) *result {
		for i := range results {
			if strings.HasPrefix(results[i].Impl.Name, prefix) && results[i].Err == nil {
				return &results[i]
			}
		}
		return nil
	}
	tr := find("presenced tracker")
	if tr == nil {
		return
	}
	fmt.Fprintln(w, "| target | medians | met | fastest rounds | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	yes := map[bool]string{true: "yes", false: "**no**"}
	// ratio compares the tracker's rounds with a peer's: at the medians, and
	// at the fastest rounds, since load from other processes only ever adds
	// time and the fastest round is the closest to the cost of the code.
	ratio := func(target string, tr, peer rounds, fasterBy bool, bound float64) {
		cell := func(a, b testing.BenchmarkResult) (string, bool) {
			x := ns(a) / ns(b)
			met := x <= bound
			if fasterBy {
				x = 1 / x
				met = x >= bound
			}
			return fmt.Sprintf("%.3fx (%s vs %s)", x, nsPerOp(a), nsPerOp(b)), met
		}
		m, mok := cell(tr.median(), peer.median())
		f, fok := cell(tr[0], peer[0])
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", target, m, yes[mok], f, yes[fok])
	}
	if fl := find("floor"); fl != nil {
		ratio("Touch within 1.25x of the floor, 1 goroutine", tr.Touch1, fl.Touch1, false, 1.25)
		ratio("Touch within 1.25x of the floor, 2 goroutines", tr.Touch2, fl.Touch2, false, 1.25)
	}
	for _, name := range []string{"map + time.AfterFunc/Reset, 1 mutex", "map + time.AfterFunc/Reset, 64 shards"} {
		if pr := find(name); pr != nil {
			ratio("Touch at least 2.5x faster than "+name+", 1 goroutine", tr.Touch1, pr.Touch1, true, 2.5)
			ratio("Touch at least 2.5x faster than "+name+", 2 goroutines", tr.Touch2, pr.Touch2, true, 2.5)
		}
	}
	var a int64
	for _, r := range append(slices.Clone(tr.Touch1), tr.Touch2...) {
		a = max(a, r.AllocsPerOp())
	}
	fmt.Fprintf(w, "| 0 allocs per Touch | %d in every round | %s | | |\n", a, yes[a == 0])
	fmt.Fprintf(w, "| at most 64 bytes per key | %.0f | %s | | |\n", tr.BytesPerKey, yes[tr.BytesPerKey <= 64])
}

func nsPerOp(r testing.BenchmarkResult) string { return fmt.Sprintf("%.1f ns", ns(r)) }

// keepaliveCell shows the median round and, if there were several, the range.
func keepaliveCell(r rounds) string {
	s := nsPerOp(r.median())
	if len(r) > 1 {
		s += fmt.Sprintf(" (%.0f–%.0f)", ns(r[0]), ns(r[len(r)-1]))
	}
	return s
}

// allocs shows allocations (and bytes) per keepalive at 1 goroutine, and at
// 2 as well when that differs.
func allocs(r1, r2 testing.BenchmarkResult) string {
	s := fmt.Sprintf("%d (%d B)", r1.AllocsPerOp(), r1.AllocedBytesPerOp())
	if r2.AllocsPerOp() != r1.AllocsPerOp() {
		s += fmt.Sprintf("; %d (%d B) at 2", r2.AllocsPerOp(), r2.AllocedBytesPerOp())
	}
	return s
}

func stepCell(r *testing.BenchmarkResult) string {
	if r == nil {
		return "n/a"
	}
	d := time.Duration(ns(*r))
	var t string
	switch {
	case d >= time.Millisecond:
		t = fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		t = fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%s, %d allocs", t, r.AllocsPerOp())
}

// cpuModel names the processor, for the reader comparing runs.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
