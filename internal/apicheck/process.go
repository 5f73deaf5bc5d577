package apicheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/wiretap"
)

// ReportEnv names the file a presenced process built with the apicheck
// tag reports to: each failure as a line, as it happens, and its counts
// in the same name with its process ID appended.
const ReportEnv = "APICHECK_REPORT"

// Report makes this process, a presenced built for the tests with
// -tags apicheck, check every frame it reads and writes, reporting to the
// file $APICHECK_REPORT names; without it, it does nothing. Call it from
// an init function.
func Report() {
	to := os.Getenv(ReportEnv)
	if to == "" {
		return
	}
	c := Default
	c.report = func(msg string) {
		f, err := os.OpenFile(to, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return
		}
		defer f.Close()
		f.WriteString(strings.ReplaceAll(msg, "\n", " ") + "\n")
	}
	wiretap.Frame = c.Frame
	// The process ends with a signal: counts kept current are counts
	// kept, within a tenth of a second.
	pid := strconv.Itoa(os.Getpid())
	counts, tmp := to+"."+pid, to+".tmp."+pid
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			if b, err := json.Marshal(c.Counts()); err == nil {
				os.WriteFile(tmp, b, 0o644)
				os.Rename(tmp, counts)
			}
		}
	}()
}

// MainWithServers is Main for tests that also run presenced processes
// (internal/presencedtest): unless $PRESENCED_BIN names a binary already,
// it builds one with -tags apicheck for them, so that their frames are
// checked too, and fails the run on what they report.
func MainWithServers(m *testing.M) int {
	if os.Getenv("PRESENCED_BIN") != "" {
		return Main(m)
	}
	dir, err := os.MkdirTemp("", "apicheck")
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "presenced")
	if out, err := exec.Command("go", "build", "-tags", "apicheck", "-o", bin, "github.com/presenced/presenced/cmd/presenced").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "apicheck: build presenced: %v\n%s", err, out)
		return 1
	}
	report := filepath.Join(dir, "report")
	os.Setenv("PRESENCED_BIN", bin)
	os.Setenv(ReportEnv, report)
	defer os.Unsetenv(ReportEnv)
	Default.collect = func() { Default.collectFrom(report) }
	return Main(m)
}

// collectFrom adds what server processes reported to report to c.
func (c *Checker) collectFrom(report string) {
	if f, err := os.Open(report); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.fail("presenced process: " + sc.Text())
		}
		f.Close()
	}
	files, _ := filepath.Glob(report + ".[0-9]*")
	for _, name := range files {
		var n Counts
		if b, err := os.ReadFile(name); err == nil && json.Unmarshal(b, &n) == nil {
			c.framesOut.Add(n.FramesOut)
			c.framesIn.Add(n.FramesIn)
			c.malformed.Add(n.Malformed)
			c.binaryIns.Add(n.Binary)
		}
	}
}
