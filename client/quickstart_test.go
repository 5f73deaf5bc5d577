package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/doctest"
)

// TestQuickStart runs the steps of the "## Go" section of docs/clients.md
// as written, in order, in a directory of its own: go mod init, main.go,
// go mod edit, go mod tidy, go run; only the checkout's path and the
// server's address change. It checks what the program prints as alice
// chats and bob comes in.
func TestQuickStart(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to build the quick start with")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "clients.md"))
	require.NoError(t, err)
	blocks, err := doctest.Section(string(doc), "## Go")
	require.NoError(t, err)
	s := startServer(t, realClock())
	script := doctest.Script(blocks, map[string]string{"go": "main.go"},
		"=../presenced", "="+root, "ws://localhost:8080/ws", s.url())
	require.Contains(t, script, "go mod init", "the steps start from a module of their own")
	require.Contains(t, script, s.url(), "the quick start dials the server")
	lines := doctest.Start(t, t.TempDir(), script, doctest.GoEnv()...)

	expect := func(want string, wait time.Duration) {
		t.Helper()
		select {
		case got, ok := <-lines:
			require.True(t, ok, "the quick start ended before printing %q", want)
			require.Equal(t, want, got)
		case <-time.After(wait):
			t.Fatalf("the quick start did not print %q", want)
		}
	}
	// A build with a cold cache on a busy machine takes minutes.
	expect("in the lobby: [alice]", 5*time.Minute)
	expect("alice: hello", waitLong)
	s.connect(t, "bob", "lobby")
	expect("in the lobby: [alice bob]", waitLong)
}
