package client_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const docAddr = "ws://localhost:8080/ws"

// quickStart returns the Go code block of the "## Go" section of
// docs/clients.md.
func quickStart(t *testing.T, root string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "clients.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## Go\n")
	require.True(t, ok, "docs/clients.md has a ## Go section")
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(section)
	require.NotNil(t, m, "the ## Go section has a go code block")
	require.Contains(t, m[1], docAddr)
	return m[1]
}

// TestQuickStart builds the quick start of docs/clients.md as written
// (only the server's address changes) in a module of its own that uses
// this repository, runs it against a real server, and checks what it
// prints as alice chats and bob comes in.
func TestQuickStart(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	s := startServer(t, realClock())
	dir := t.TempDir()
	src := strings.Replace(quickStart(t, root), docAddr, s.url(), 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	gomod := "module quickstart\n\ngo 1.26\n\nrequire github.com/presenced/presenced v0.0.0\n\nreplace github.com/presenced/presenced => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build the quick start with")
	}
	// A build with a cold cache on a busy machine (the rest of the suite
	// compiling beside it) takes minutes: its deadline is the build's own,
	// well inside go test's.
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer bcancel()
	build := exec.CommandContext(bctx, goBin, "build", "-o", "quickstart", ".")
	build.Dir = dir
	// Offline, from the module cache this repository's build filled.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build the quick start:\n%s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLong)
	defer cancel()
	run := exec.CommandContext(ctx, filepath.Join(dir, "quickstart"))
	stdout, err := run.StdoutPipe()
	require.NoError(t, err)
	run.Stderr = os.Stderr
	require.NoError(t, run.Start())
	t.Cleanup(func() {
		_ = run.Process.Kill()
		_ = run.Wait()
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case got, ok := <-lines:
			require.True(t, ok, "the quick start ended before printing %q", want)
			require.Equal(t, want, got)
		case <-time.After(waitLong):
			t.Fatalf("the quick start did not print %q", want)
		}
	}
	expect("in the lobby: [alice]")
	expect("alice: hello")
	s.connect(t, "bob", "lobby")
	expect("in the lobby: [alice bob]")
}
