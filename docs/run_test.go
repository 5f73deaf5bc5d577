package docs_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/doctest"
	"github.com/presenced/presenced/internal/presencedtest"
)

// waitLong bounds a wait for something that takes a moment; a build from a
// cold cache on a busy machine gets buildWait.
const (
	waitLong  = 20 * time.Second
	buildWait = 5 * time.Minute
)

// sectionBlocks returns the fenced blocks of a section of one of the docs.
func sectionBlocks(t *testing.T, file, heading string) []doctest.Block {
	t.Helper()
	md, err := os.ReadFile(file)
	require.NoError(t, err)
	blocks, err := doctest.Section(string(md), heading)
	require.NoError(t, err, file)
	return blocks
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// waitListening waits until something listens on addr.
func waitListening(t *testing.T, addr, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, waitLong, 20*time.Millisecond, "%s never listened on %s", what, addr)
}

func checkout(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	return root
}

// TestEmbeddingQuickStart runs the quick start of embedding.md as written,
// in order, from go mod init (only the checkout's path changes, and the
// address, given with -addr), and checks that what it serves is the page,
// the JavaScript client, the metrics, the health checks and the WebSocket,
// and that a SIGTERM closes the WebSocket with 1001 and ends the program.
func TestEmbeddingQuickStart(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to build the quick start with")
	}
	addr := freeAddr(t)
	script := doctest.Script(sectionBlocks(t, "embedding.md", "## Quick start"), map[string]string{"go": "main.go"},
		"=../presenced", "="+checkout(t), "go run .\n", "go run . -addr "+addr+"\n")
	require.Contains(t, script, "go mod init")
	require.Contains(t, script, addr)
	run := doctest.Launch(t, t.TempDir(), script, doctest.GoEnv()...)
	out := run.Lines

	base := "http://" + addr
	deadline := time.Now().Add(buildWait)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case _, open := <-out:
			require.True(t, open, "the quick start ended before it served")
		case <-time.After(100 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the quick start's server never answered /healthz")
	}
	for _, tc := range []struct{ path, typ, has string }{
		{"/", "text/html", "<title>presenced"},
		{"/presenced.js", "text/javascript", "export class Presenced"},
		{"/metrics", "text/plain", "presenced_connections"},
		{"/readyz", "application/json", `"status":"ok"`},
	} {
		resp, err := http.Get(base + tc.path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, tc.path)
		assert.Contains(t, resp.Header.Get("Content-Type"), tc.typ, tc.path)
		assert.Contains(t, string(body), tc.has, tc.path)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid=alice", nil)
	require.NoError(t, err)
	defer ws.Close()
	var welcome struct{ Type, UID string }
	require.NoError(t, ws.SetReadDeadline(time.Now().Add(waitLong)))
	require.NoError(t, ws.ReadJSON(&welcome))
	assert.Equal(t, "welcome", welcome.Type)
	assert.Equal(t, "alice", welcome.UID)

	require.NoError(t, run.Terminate())
	var closed *websocket.CloseError
	for {
		_, _, err := ws.ReadMessage()
		if err != nil {
			require.ErrorAs(t, err, &closed, "the quick start's WebSocket ended without a close frame")
			break
		}
	}
	assert.Equal(t, websocket.CloseGoingAway, closed.Code, "the close code after SIGTERM")
	deadline = time.Now().Add(waitLong)
	for open := true; open; {
		select {
		case _, open = <-out:
		case <-time.After(time.Until(deadline)):
			t.Fatal("the quick start still runs after SIGTERM")
		}
	}
}

// takeServerLine takes out of blocks the one that runs the server, which
// the test runs itself as a process it manages, and returns the rest and
// what line's groups matched: the server's flags.
func takeServerLine(t *testing.T, blocks []doctest.Block, line string) ([]doctest.Block, []string) {
	t.Helper()
	re := regexp.MustCompile(line)
	var flags []string
	blocks = slices.DeleteFunc(blocks, func(b doctest.Block) bool {
		if m := re.FindStringSubmatch(b.Text); m != nil {
			flags = m[1:]
			return true
		}
		return false
	})
	require.NotNil(t, flags, "the section runs the server as %s", line)
	return blocks, flags
}

// TestChatWebhookReceiver runs the webhook receiver of chat.md with Node as
// written (standardwebhooks from web/client's lockfile instead of the
// registry, a free port for 8090), points a real server at it with the
// doc's flags, and checks that it prints alice coming online and her
// update with its mode and note.
func TestChatWebhookReceiver(t *testing.T) {
	node, err := exec.LookPath("node")
	modules := filepath.Join(checkout(t), "web", "client", "node_modules")
	if _, serr := os.Stat(filepath.Join(modules, "standardwebhooks")); err != nil || serr != nil {
		msg := "needs node and web/client/node_modules (cd web/client && npm ci)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI is set, so this is a failure")
		}
		t.Skip(msg)
	}
	blocks, server := takeServerLine(t, sectionBlocks(t, "chat.md", "### Verifying a POST"),
		`go run \./cmd/presenced -webhook (\S+) -webhook-secret (\S+)`)
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	script := doctest.Script(blocks, map[string]string{"js": "receiver.mjs"},
		"npm install standardwebhooks", "ln -s "+modules+" node_modules", "8090", port)
	require.Contains(t, script, "node receiver.mjs")
	lines := doctest.Start(t, t.TempDir(), strings.ReplaceAll(script, "node receiver.mjs", node+" receiver.mjs"))
	waitListening(t, "127.0.0.1:"+port, "the receiver")

	srv := presencedtest.Start(t, presencedtest.Build(t), "-webhook", strings.Replace(server[0], "8090", port, 1),
		"-webhook-secret", server[1])
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws?uid=alice&channels=lobby", nil)
	require.NoError(t, err)
	defer ws.Close()
	set, err := json.Marshal(map[string]any{"type": "set", "mode": "dnd", "note": map[string]string{"text": "In a meeting", "emoji": "📅"}})
	require.NoError(t, err)
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, set))

	want := []*regexp.Regexp{
		regexp.MustCompile(`^evt_\S+ online alice $`),
		regexp.MustCompile(`^evt_\S+ join alice lobby$`),
		regexp.MustCompile(`^evt_\S+ update alice dnd 📅 In a meeting$`),
	}
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for len(want) > 0 {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the receiver ended; it printed %q", got)
			got = append(got, line)
			if want[0].MatchString(line) {
				want = want[1:]
			}
		case <-ctx.Done():
			t.Fatalf("the receiver printed %q, not %v", got, want)
		}
	}
}

// TestDocsServerCommandsStart starts presenced as each command line of a
// shell block of README.md and the docs says to, with go run or a built
// binary's path (its variables and flags; the listening address is the
// test's), and checks that it serves: the flags, variables and values the
// docs show are the server's. A line with -redis gets a redis-server of
// the test's at the address it names.
func TestDocsServerCommandsStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server per command line: not in -short")
	}
	files, err := filepath.Glob("*.md")
	require.NoError(t, err)
	files = append(files, filepath.Join("..", "README.md"))
	command := regexp.MustCompile(`^((?:[A-Z_]+=\S+ )*)(?:(?:\S*/)?presenced|go run \./cmd/presenced)(?: (.*))?$`)
	bin := presencedtest.Build(t)
	started := 0
	for _, file := range files {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		_, fenced := fences(string(raw))
		for line := range strings.SplitSeq(fenced, "\n") {
			line, _, _ = strings.Cut(line, "  #") // a comment after the command
			m := command.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil {
				continue
			}
			t.Run(filepath.Base(file)+": "+line, func(t *testing.T) {
				for _, kv := range strings.Fields(m[1]) {
					k, v, _ := strings.Cut(kv, "=")
					t.Setenv(k, v)
				}
				var args []string
				fields := strings.Fields(m[2])
				for i := 0; i < len(fields); i++ {
					switch {
					case fields[i] == "-addr" && i+1 < len(fields):
						i++ // the test's address instead
					case fields[i] == "-redis" && i+1 < len(fields):
						args = append(args, "-redis", startRedis(t, fields[i+1]))
						i++
					default:
						args = append(args, fields[i])
					}
				}
				srv := presencedtest.Start(t, bin, args...)
				resp, err := http.Get(srv.URL + "/readyz")
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			})
			started++
		}
	}
	assert.GreaterOrEqual(t, started, 5, "command lines started")
}

// startRedis runs a redis-server of the test's on a free port and returns
// url (redis://host:port/db) pointed at it; it skips where Redis is not
// installed, but in CI.
func startRedis(t *testing.T, url string) string {
	t.Helper()
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no redis-server; CI is set, so this is a failure")
		}
		t.Skip("no redis-server on PATH (apt-get install redis-server)")
	}
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	cmd := exec.Command(redis, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitListening(t, "127.0.0.1:"+port, "redis-server")
	return regexp.MustCompile(`//[^/]+`).ReplaceAllString(url, "//127.0.0.1:"+port)
}

// TestChatCatchUpReceiver runs the catch-up receiver of chat.md with Node as
// written (a free port for 8091) against a real server run with the doc's
// flags, and checks the state it prints: through the live flow, after its
// own outage (it reads on from its saved cursor), and after the server's
// restart (the new log cannot vouch for the old cursor: a snapshot).
func TestChatCatchUpReceiver(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("needs node; CI is set, so this is a failure")
		}
		t.Skip("needs node")
	}
	blocks, server := takeServerLine(t, sectionBlocks(t, "chat.md", "## Catching up after an outage"),
		`go run \./cmd/presenced -api-key (\S+) -webhook (\S+)`)
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	srv := presencedtest.Start(t, presencedtest.Build(t), "-api-key", server[0], "-webhook", strings.Replace(server[1], "8091", port, 1))
	script := doctest.Script(blocks, map[string]string{"js": "catchup.mjs"}, "8091", port, "http://127.0.0.1:8080", srv.URL)
	require.Contains(t, script, "node catchup.mjs")
	script = strings.ReplaceAll(script, "node catchup.mjs", node+" catchup.mjs")
	dir := t.TempDir()

	// The receiver's state must come to want: the line it prints.
	expect := func(lines <-chan string, want string) {
		t.Helper()
		var got []string
		deadline := time.After(waitLong)
		for {
			select {
			case line, ok := <-lines:
				require.True(t, ok, "the receiver ended; it printed %q", got)
				got = append(got, line)
				if line == want {
					return
				}
			case <-deadline:
				t.Fatalf("the receiver printed %q, never %q", got, want)
			}
		}
	}
	dial := func(uid string) *websocket.Conn {
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws?uid="+uid, nil)
		require.NoError(t, err)
		return ws
	}
	run := doctest.Launch(t, dir, script)
	waitListening(t, "127.0.0.1:"+port, "the receiver")
	alice, bob := dial("alice"), dial("bob")
	defer alice.Close()
	expect(run.Lines, "online alice bob")

	// Down: bob leaves and carol comes while nobody listens.
	require.NoError(t, run.Terminate())
	for range run.Lines {
	}
	require.NoError(t, bob.Close())
	carol := dial("carol")
	defer carol.Close()
	online := func(uid string, want bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/presence/"+uid, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "apikey "+server[0])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var st struct{ Online bool }
			return json.NewDecoder(resp.Body).Decode(&st) == nil && st.Online == want
		}, waitLong, 20*time.Millisecond, "%s online: %v", uid, want)
	}
	online("bob", false)
	online("carol", true)
	run = doctest.Launch(t, dir, script)
	expect(run.Lines, "online alice carol")

	// The server restarts: its log is new, the receiver's cursor is not its.
	require.NoError(t, run.Terminate())
	for range run.Lines {
	}
	alice.Close()
	carol.Close()
	srv.Stop()
	srv.Restart()
	dave := dial("dave")
	defer dave.Close()
	online("dave", true)
	run = doctest.Launch(t, dir, script)
	expect(run.Lines, "snapshot 1")
	expect(run.Lines, "online dave")
}
