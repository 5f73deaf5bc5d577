// Command underfire measures a built presenced binary under bursts, floods,
// freezes, reconnect races, abuse and churn, with real processes and real
// gorilla clients over loopback, and prints the figures as a markdown table.
//
//	go build -o /tmp/presenced ./cmd/presenced
//	cd bench && go run ./underfire -bin /tmp/presenced [-before /tmp/presenced-old]
//
// Every scenario starts its own presenced process(es) (and redis-server for
// the cluster ones) on free loopback ports, prints one line of figures to
// stdout as it ends, and stops what it started. Progress goes to stderr.
// With -before, each scenario runs first on that binary, then on -bin, the
// same way. The table at the end has one row per case: the figure measured
// on -before, the figure measured on -bin, and how.
//
// A binary is started only with the flags its -h lists. A flag that tunes a
// feature under test (optional, below) is left out on a binary without it,
// which lacks the feature, and the cell says so; a scenario that needs any
// other flag the binary lacks does not run on it, and its cell says "n/a"
// and why, as for any scenario that cannot go on.
// Load stays on 127.0.0.1 and is bounded in count and time.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// config is what the flags ask for.
type config struct {
	bin         string // the after column
	before      string // the before column; empty: not measured
	redisBin    string
	only        string
	logDir      string
	freeze      time.Duration
	churnUsers  int
	onlineUsers int
}

func parseFlags() config {
	var c config
	flag.StringVar(&c.bin, "bin", "/tmp/presenced", "presenced binary to measure (the after column)")
	flag.StringVar(&c.before, "before", "", "an older presenced binary to measure the same way (the before column); empty: not measured")
	flag.StringVar(&c.redisBin, "redis-server", "redis-server", "redis-server binary, for the cluster cases")
	flag.StringVar(&c.only, "only", "", "comma-separated scenarios to run (burst,flood,freeze,reconnect,cap,utf8,jwt,churn,list,cluster,cut); empty: all")
	flag.StringVar(&c.logDir, "logs", "", "directory for the servers' output; empty: a new temporary directory")
	flag.DurationVar(&c.freeze, "freeze", 40*time.Second, "how long the freeze case stops the server")
	flag.IntVar(&c.churnUsers, "churn-users", 500_000, "users that come and go in the churn case")
	flag.IntVar(&c.onlineUsers, "online-users", 200_000, "users online in the /api/presence latency case")
	flag.Parse()
	return c
}

// scenario is one entry of -only: it measures what its rows say on the
// binary of r. An error means it could not go on; the processes it started
// are stopped by then.
type scenario struct {
	name string
	run  func(r *run) ([]row, error)
}

var scenarios = []scenario{
	{"burst", burst},
	{"flood", flood},
	{"freeze", freezeCase},
	{"reconnect", reconnect},
	{"cap", connCap},
	{"utf8", invalidUTF8},
	{"jwt", jwtBasic},
	{"churn", churn},
	{"list", listLatency},
	{"cluster", cluster},
	{"cut", cut},
}

// harness is what the runs of every scenario share.
type harness struct {
	config
	logs atomic.Int32 // log files created, to number the next one
}

// run is one scenario running on one binary.
type run struct {
	*harness
	bin     *binary
	dropped map[string]bool // optional flags asked for that bin lacks
}

func main() {
	cfg := parseFlags()
	if cfg.logDir == "" {
		d, err := os.MkdirTemp("", "underfire.")
		if err != nil {
			exitf("%v", err)
		}
		cfg.logDir = d
	}
	afterBin, err := loadBinary("after", cfg.bin)
	if err != nil {
		exitf("%v", err)
	}
	var beforeBin *binary
	if cfg.before != "" {
		if beforeBin, err = loadBinary("before", cfg.before); err != nil {
			exitf("%v", err)
		}
	}
	want := map[string]bool{}
	for s := range strings.SplitSeq(cfg.only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	h := &harness{config: cfg}
	progress("logs in %s", cfg.logDir)
	var lines []line
	for _, s := range scenarios {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		var before outcome
		if beforeBin != nil {
			before = h.runOn(beforeBin, s)
		}
		lines = append(lines, compare(s.name, beforeBin != nil, before, h.runOn(afterBin, s))...)
	}
	printTable(lines)
}

// runOn runs scenario s on b.
func (h *harness) runOn(b *binary, s scenario) outcome {
	r := &run{harness: h, bin: b, dropped: map[string]bool{}}
	start := time.Now()
	progress("%s on %s: start", s.name, b.label)
	rows, err := s.run(r)
	if err != nil {
		progress("%s on %s: could not run: %v", s.name, b.label, err)
		return outcome{failed: err.Error()}
	}
	progress("%s on %s: done in %v", s.name, b.label, time.Since(start).Round(100*time.Millisecond))
	if len(r.dropped) > 0 {
		var fs []string
		for _, f := range slices.Sorted(maps.Keys(r.dropped)) {
			fs = append(fs, "`-"+f+"`")
		}
		note := fmt.Sprintf(" (started without %s: not a flag of this binary)", strings.Join(fs, ", "))
		for i := range rows {
			rows[i].figure += note
		}
	}
	return outcome{rows: rows}
}

// figures prints a scenario's one line of figures, measured on r.bin.
func (r *run) figures(name, format string, args ...any) {
	fmt.Printf("%s [%s]: %s\n", name, r.bin.label, fmt.Sprintf(format, args...))
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "underfire %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func exitf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "underfire: "+format+"\n", args...)
	os.Exit(1)
}
