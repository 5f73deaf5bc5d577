// Package doctest runs what the documentation tells a newcomer to type: the
// shell blocks of a section of a Markdown file and the files it says to
// save, in the order the section gives them, as one shell script.
package doctest

import (
	"bufio"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/presenced/presenced/internal/presencedtest"
)

// A Block is a fenced block of Markdown: its language and its text.
type Block struct {
	Lang string
	Text string
}

// Section returns the fenced blocks of md between the heading line
// heading ("## Go") and the next heading of its level or above, in order.
func Section(md, heading string) ([]Block, error) {
	_, rest, ok := strings.Cut(md, "\n"+heading+"\n")
	if !ok {
		return nil, fmt.Errorf("doctest: no heading %q", heading)
	}
	level := strings.Count(strings.Fields(heading)[0], "#")
	end := regexp.MustCompile(fmt.Sprintf(`(?m)^#{1,%d} `, level))
	var blocks []Block
	var cur *Block
	for line := range strings.SplitSeq(rest, "\n") {
		switch {
		case cur == nil && end.MatchString(line):
			return blocks, nil
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &Block{Lang: strings.TrimPrefix(line, "```")}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Text += line + "\n"
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("doctest: a block of %q is not closed", heading)
	}
	return blocks, nil
}

// Script makes one shell script of blocks: each sh block as it is, and each
// block whose language files names written to that file, where the script
// has come to; blocks of other languages (output, JSON) are left out.
// replace then makes the script's edits, old and new in pairs: the
// addresses and paths of the machine it runs on.
func Script(blocks []Block, files map[string]string, replace ...string) string {
	var b strings.Builder
	for _, bl := range blocks {
		switch name, ok := files[bl.Lang]; {
		case bl.Lang == "sh":
			b.WriteString(bl.Text)
		case ok:
			fmt.Fprintf(&b, "cat > %s <<'DOCTEST_EOF'\n%sDOCTEST_EOF\n", name, bl.Text)
		}
	}
	return strings.NewReplacer(replace...).Replace(b.String())
}

// GoEnv is the environment of a script that builds a module of its own:
// outside any workspace, with the Go of the machine, the modules as a
// newcomer gets them (from the module cache, or else the Go proxy).
func GoEnv() []string {
	return []string{"GOWORK=off", "GOTOOLCHAIN=local"}
}

// Start runs script with sh -e in dir, its environment the test's with env
// added, and returns the lines of its standard output, closed when it
// exits. The test's cleanup ends it and whatever it started (go run's
// program); its standard error is logged if the test fails.
func Start(t testing.TB, dir, script string, env ...string) <-chan string {
	t.Helper()
	return Launch(t, dir, script, env...).Lines
}

// A Run is a script started by Launch.
type Run struct {
	// Lines are the lines of the standard output of the script and of what
	// it started, closed once all of them have exited.
	Lines <-chan string
	cmd   *exec.Cmd
}

// Terminate sends SIGTERM to the script and whatever it started, as a
// terminal's Ctrl-C reaches go run's program too: the program's graceful
// shutdown is under test, not go run's.
func (r *Run) Terminate() error { return terminate(r.cmd) }

// Launch is Start, for a test that also ends the script itself.
func Launch(t testing.TB, dir, script string, env ...string) *Run {
	t.Helper()
	cmd := exec.Command("sh", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), env...)
	group(cmd)
	var stderr presencedtest.SyncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("doctest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("doctest: start the script: %v", err)
	}
	lines := make(chan string, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		kill(cmd)
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the script:\n%s\nits standard error:\n%s", script, stderr.String())
		}
	})
	return &Run{Lines: lines, cmd: cmd}
}
