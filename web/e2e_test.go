package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
)

// The e2e ring: 21 slots of 100 ms, so the timeout is 2 s.
const (
	e2eSlots   = 21
	e2eTick    = 100 * time.Millisecond
	e2eTimeout = (e2eSlots - 1) * e2eTick
	// e2eWait bounds each wait for the page or the server: generous, for
	// Chromium and the server under -race on a loaded machine.
	e2eWait = 20 * time.Second
)

// findChromium returns the browser to drive, or "" when there is none.
func findChromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		return ""
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// needChromium skips the test where no browser is installed, except in CI,
// where a missing browser means a broken setup and must fail.
func needChromium(t *testing.T) string {
	t.Helper()
	p := findChromium()
	if p == "" {
		const msg = "no Chromium found (looked for chromium, chromium-browser, google-chrome, headless-shell and $CHROMIUM): " +
			"install the Debian package with `apt-get install chromium` to run the browser tests"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI is set, so this is a failure")
		}
		t.Skip(msg)
	}
	return p
}

// server is a presenced process on a loopback port.
type server struct{ *presencedtest.Process }

// startPresenced builds ./cmd/presenced (or takes $PRESENCED_BIN) and runs it
// on a free loopback port with the given flags; it stops it with SIGTERM when
// the test ends.
func startPresenced(t *testing.T, flags ...string) *server {
	t.Helper()
	return &server{presencedtest.Start(t, presencedtest.Build(t), flags...)}
}

func (s *server) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	res, err := http.Get(s.URL + path)
	require.NoError(t, err, "GET %s", path)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "GET %s", path)
	require.NoError(t, json.NewDecoder(res.Body).Decode(v), "decode %s", path)
}

type presenceOne struct {
	UID         string `json:"uid"`
	Online      bool   `json:"online"`
	Connections int    `json:"connections"`
}

func (s *server) online(t *testing.T, uid string) bool {
	t.Helper()
	var p presenceOne
	s.getJSON(t, "/api/presence/"+uid, &p)
	return p.Online
}

// browser is a headless Chromium with a console watch on every tab.
type browser struct {
	t       *testing.T
	ctx     context.Context // the first tab; its context owns the browser
	mu      sync.Mutex
	console []consoleError
	outages [][2]time.Time // while the server was down on purpose
}

type consoleError struct {
	tab string
	msg chromedp.ConsoleMessage
}

func (e consoleError) String() string {
	return fmt.Sprintf("%s: %s [%s %s:%d]", e.tab, e.msg, e.msg.Source, e.msg.URL, e.msg.Line)
}

// startBrowser starts Chromium with a fresh profile. The background-networking
// flags matter here: without them this machine refuses the connections.
func startBrowser(t *testing.T, path string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	b.watch("page 1", ctx)
	return b
}

// tab opens another tab in the same browser.
func (b *browser) tab(name string) context.Context {
	ctx, cancel := chromedp.NewContext(b.ctx)
	b.t.Cleanup(cancel)
	b.watch(name, ctx)
	return ctx
}

// watch records console errors and uncaught exceptions of a tab; Console
// subscribes at once (and creates the tab), so nothing the page logs is lost.
func (b *browser) watch(name string, ctx context.Context) {
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.console = append(b.console, consoleError{tab: name, msg: m})
				b.mu.Unlock()
			} else {
				b.t.Logf("console %s: %s", name, m)
			}
		}
	}()
}

// outage records that the server was down from..to on purpose: the browser's
// own reports of refused connections then are expected, and nothing else is.
func (b *browser) outage(from, to time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outages = append(b.outages, [2]time.Time{from, to})
}

// errors returns the console errors and exceptions, less the network errors
// of a planned outage.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, e := range b.console {
		if b.expected(e.msg) {
			b.t.Logf("expected during the outage: %s", e)
			continue
		}
		out = append(out, e.String())
	}
	return out
}

func (b *browser) expected(m chromedp.ConsoleMessage) bool {
	if m.IsException() {
		return false
	}
	refused := strings.Contains(m.Text, "ERR_CONNECTION_REFUSED") ||
		(strings.HasPrefix(m.Text, "WebSocket connection to ") && strings.Contains(m.Text, "failed"))
	for _, w := range b.outages {
		if refused && !m.Time.Before(w[0]) && !m.Time.After(w[1]) {
			return true
		}
	}
	return false
}

// do runs actions on a tab with a deadline, failing the test on error.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, actions...), what)
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, e2eWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	require.NoError(t, err, js)
	return v
}

// waitJS polls a JavaScript predicate in the page until it is true.
func waitJS(t *testing.T, ctx context.Context, what, js string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(20*time.Millisecond)))
	require.NoError(t, err, "waiting for %s: %s", what, js)
}

func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		})
		return err
	})
}

// artifactPath is where a screenshot goes: $ARTIFACTS_DIR when set, so CI can
// keep it, else the test's temporary directory.
func artifactPath(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("ARTIFACTS_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return filepath.Join(dir, name)
}

func screenshot(t *testing.T, ctx context.Context, file string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err, "screenshot")
	require.NoError(t, os.WriteFile(file, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", file, len(png))
}

func q(s string) string { return strconv.Quote(s) }

// TestE2E drives the page in a real Chromium against a real presenced on a
// short ring: the page connects, the ring turns, a silenced simulated client
// goes idle and is dropped with 4408 within timeout+tick, chat crosses from
// one tab to another, and the console stays clean.
func TestE2E(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	b := startBrowser(t, chromium)
	a := b.ctx

	// The page works with no parameters: it picks a guest ID and connects.
	do(t, a, "open the page", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	uid := eval[string](t, a, `document.getElementById('me-uid').textContent`)
	require.Regexp(t, `^guest-[0-9a-z]{4}$`, uid)
	var list struct {
		Count int      `json:"count"`
		Users []string `json:"users"`
	}
	srv.getJSON(t, "/api/presence", &list)
	assert.Contains(t, list.Users, uid, "the page's user is online at the server")
	var me presenceOne
	srv.getJSON(t, "/api/presence/"+uid, &me)
	assert.Equal(t, presenceOne{UID: uid, Online: true, Connections: 1}, me)
	waitJS(t, a, "own user listed", `!!document.querySelector('#users li[data-uid=`+q(uid)+`]')`, e2eWait)

	t.Run("ring", func(t *testing.T) {
		assert.Equal(t, e2eSlots, eval[int](t, a, `document.querySelectorAll('#ring .slot').length`), "one drawn slot per server slot")
		assert.Contains(t, eval[string](t, a, `document.getElementById('ring-words').textContent`), "silent for 2.0 s",
			"the timeout in words: (21-1) x 100 ms")
		c0 := eval[string](t, a, `document.getElementById('ring').dataset.cursor`)
		waitJS(t, a, "the cursor to move", `document.getElementById('ring').dataset.cursor !== `+q(c0), e2eWait)
		// The drawn cursor follows the server's, which steps every 100 ms.
		var r struct {
			Slots  int   `json:"slots"`
			TickMS int   `json:"tick_ms"`
			Cursor int   `json:"cursor"`
			Due    []int `json:"due"`
		}
		srv.getJSON(t, "/api/ring", &r)
		assert.Equal(t, e2eSlots, r.Slots)
		assert.Equal(t, int(e2eTick/time.Millisecond), r.TickMS)
		drawn, err := strconv.Atoi(eval[string](t, a, `document.getElementById('ring').dataset.cursor`))
		require.NoError(t, err)
		lag := (r.Cursor - drawn + e2eSlots) % e2eSlots
		assert.LessOrEqual(t, lag, 10, "drawn cursor %d, server cursor %d: more than a second apart", drawn, r.Cursor)
	})

	t.Run("silenced client drops with 4408", func(t *testing.T) {
		do(t, a, "spawn 3", chromedp.SetValue(chromedp.CSS("#spawn-n"), "3"), chromedp.Click(chromedp.CSS("#spawn")))
		waitJS(t, a, "3 live simulated clients", `document.querySelectorAll('#sims .sim[data-state="live"]').length === 3`, e2eWait)
		sims := eval[[]string](t, a, `[...document.querySelectorAll('#sims .sim')].map(li => li.dataset.uid)`)
		require.Len(t, sims, 3)
		for _, s := range sims {
			assert.True(t, srv.online(t, s), "%s online at the server", s)
		}
		victim, others := sims[0], sims[1:]
		row := `#sims .sim[data-uid=` + q(victim) + `]`

		// Server steps are counted from the cursor, polled far more often
		// than it wraps: the ring, not the wall clock, says when is too early.
		cursor := func() int {
			var r struct {
				Cursor int `json:"cursor"`
			}
			srv.getJSON(t, "/api/ring", &r)
			return r.Cursor
		}
		last, steps := cursor(), 0
		start := time.Now()
		do(t, a, "silence "+victim, chromedp.Click(chromedp.CSS(row+` button[data-act="silence"]`)))
		var gone time.Duration
		require.Eventually(t, func() bool {
			c := cursor()
			steps += (c - last + e2eSlots) % e2eSlots
			last = c
			if srv.online(t, victim) {
				return false
			}
			gone = time.Since(start)
			return true
		}, e2eTimeout+e2eTick+20*time.Second, 10*time.Millisecond, "%s never went offline", victim)
		t.Logf("silenced %s went offline after %v, %d steps (timeout %v, tick %v)", victim, gone, steps, e2eTimeout, e2eTick)
		// Offline comes from the ring, not from the page: the silence frame
		// itself (sent after the first cursor read) is the last keepalive, and
		// a key is reported by the Slots-th step after its touch.
		assert.GreaterOrEqual(t, steps, e2eSlots-1, "dropped too early")

		// The others kept sending keepalives and outlived a whole timeout.
		for _, s := range others {
			assert.True(t, srv.online(t, s), "%s, not silenced, is still online", s)
		}

		// What the page shows: idle first, then the close and the offline edge.
		waitJS(t, a, "the offline event in the log", `!!document.querySelector('#log li[data-kind="offline"][data-uid=`+q(victim)+`]')`, e2eWait)
		closed := eval[string](t, a, `document.querySelector('#log li[data-kind="closed"][data-uid=`+q(victim)+`]')?.textContent || ''`)
		assert.Contains(t, closed, "4408 idle timeout")
		order := eval[[]string](t, a, `[...document.querySelectorAll('#log li[data-uid=`+q(victim)+`]')].reverse().map(li => li.dataset.kind)`)
		require.GreaterOrEqual(t, len(order), 5, "log of %s, oldest first: %v", victim, order)
		assert.Equal(t, []string{"online", "silenced", "idle"}, order[:3], "log of %s, oldest first", victim)
		assert.ElementsMatch(t, []string{"closed", "offline"}, order[3:5], "log of %s, oldest first: %v", victim, order)
		waitJS(t, a, "the row closed", `document.querySelector(`+q(row)+`).dataset.state === "closed"`, e2eWait)
		assert.Contains(t, eval[string](t, a, `document.querySelector(`+q(row+` .status`)+`).textContent`), "4408 idle timeout")
		waitJS(t, a, "gone from the online list", `!document.querySelector('#users li[data-uid=`+q(victim)+`]')`, e2eWait)

		// Bring back reconnects it.
		do(t, a, "bring back "+victim, chromedp.Click(chromedp.CSS(row+` button[data-act="back"]`)))
		waitJS(t, a, victim+" live again", `document.querySelector(`+q(row)+`).dataset.state === "live"`, e2eWait)
		assert.True(t, srv.online(t, victim), "%s online again", victim)
	})

	t.Run("chat between two pages", func(t *testing.T) {
		bob := b.tab("page 2")
		do(t, bob, "open a second page", chromedp.EmulateViewport(800, 700), chromedp.Navigate(srv.URL+"/?uid=e2e-bob"),
			chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
		assert.Equal(t, "e2e-bob", eval[string](t, bob, `document.getElementById('me-uid').textContent`), "?uid= is honoured")
		waitJS(t, a, "bob listed on page 1", `!!document.querySelector('#users li[data-uid="e2e-bob"]')`, e2eWait)

		text := `hello from the ring <b>not bold</b>`
		do(t, a, "send a chat message", chromedp.SendKeys(chromedp.CSS("#chat-text"), text), chromedp.Click(chromedp.CSS("#chat-send")))
		sel := `#chat li[data-from=` + q(uid) + `] p`
		waitJS(t, bob, "the message on page 2", `!!document.querySelector(`+q(sel)+`)`, e2eWait)
		assert.Equal(t, text, eval[string](t, bob, `document.querySelector(`+q(sel)+`).textContent`))
		assert.Zero(t, eval[int](t, bob, `document.querySelectorAll('#chat b').length`), "chat text is shown as text, not HTML")
		assert.Empty(t, eval[string](t, a, `document.getElementById('chat-text').value`), "the box is cleared after sending")

		do(t, bob, "reply", chromedp.SendKeys(chromedp.CSS("#chat-text"), "hi, I can see your simulated clients"), chromedp.Click(chromedp.CSS("#chat-send")))
		waitJS(t, a, "the reply on page 1", `!!document.querySelector('#chat li[data-from="e2e-bob"]')`, e2eWait)
	})

	t.Run("layout", func(t *testing.T) {
		for _, vp := range []struct {
			name string
			w, h int64
		}{{"desktop", 1280, 800}, {"phone", 390, 844}} {
			do(t, a, "resize", chromedp.EmulateViewport(vp.w, vp.h))
			overflow := eval[int](t, a, `document.documentElement.scrollWidth - document.documentElement.clientWidth`)
			assert.LessOrEqual(t, overflow, 0, "%s: the page scrolls sideways by %dpx", vp.name, overflow)
		}
		bg := map[string]string{}
		for _, scheme := range []string{"light", "dark"} {
			do(t, a, scheme, colorScheme(scheme))
			bg[scheme] = eval[string](t, a, `getComputedStyle(document.body).backgroundColor`)
		}
		assert.NotEqual(t, bg["light"], bg["dark"], "prefers-color-scheme changes the theme")
		do(t, a, "back to light desktop", colorScheme("light"), chromedp.EmulateViewport(1280, 800))
	})

	// Silence one more so the screenshot shows every state.
	do(t, a, "silence one", chromedp.Click(chromedp.CSS("#silence-one")))
	waitJS(t, a, "an idle client", `!!document.querySelector('#sims .sim[data-state="idle"]')`, e2eWait)
	screenshot(t, a, artifactPath(t, "presenced-e2e.png"))

	t.Run("reconnect after a server restart", func(t *testing.T) {
		from := time.Now()
		defer func() { b.outage(from, time.Now()) }()
		srv.Stop() // SIGTERM: every connection gets 1001
		waitJS(t, a, "the page to notice", `document.getElementById('me').dataset.state !== "live"`, e2eWait)
		waitJS(t, a, "close 1001 shown", `document.getElementById('me-close').textContent.startsWith("1001")`, e2eWait)
		assert.Contains(t, eval[string](t, a, `document.querySelector('#log li[data-kind="conn"]').textContent`), "reconnecting with backoff")
		waitJS(t, a, "a reconnect scheduled", `document.getElementById('me').dataset.state === "waiting"`, e2eWait)
		assert.Regexp(t, `^reconnect try 1 in `, eval[string](t, a, `document.getElementById('me-state').textContent`))
		// Let it fail at least once against the closed port before the server returns.
		waitJS(t, a, "a failed try", `/^reconnect try [2-9] in /.test(document.getElementById('me-state').textContent)`, e2eWait)
		srv.Restart()
		waitJS(t, a, "reconnected", `document.getElementById('me').dataset.state === "live"`, e2eWait)
		assert.True(t, srv.online(t, uid), "%s online at the restarted server", uid)
		// A refused attempt is a 1006 without a close frame.
		assert.True(t, eval[bool](t, a, `[...document.querySelectorAll('#log li[data-kind="conn"]')].some(li => li.textContent.includes("1006"))`))
	})

	t.Run("disconnect and connect by hand", func(t *testing.T) {
		do(t, a, "disconnect", chromedp.Click(chromedp.CSS("#me-toggle")))
		waitJS(t, a, "closed", `document.getElementById('me').dataset.state === "closed"`, e2eWait)
		require.Eventually(t, func() bool { return !srv.online(t, uid) }, 20*time.Second, 10*time.Millisecond, "offline after Disconnect")
		assert.Equal(t, "Connect", eval[string](t, a, `document.getElementById('me-toggle').textContent`))
		assert.True(t, strings.HasPrefix(eval[string](t, a, `document.getElementById('me-close').textContent`), "1000"), "a normal close")
		do(t, a, "connect", chromedp.Click(chromedp.CSS("#me-toggle")))
		waitJS(t, a, "live", `document.getElementById('me').dataset.state === "live"`, e2eWait)
		assert.True(t, srv.online(t, uid), "online after Connect")
	})

	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestDemoScreenshot renders docs/demo.png against presenced with its default
// ring (31 slots of 1 s). It takes about 40 s, so it runs only when asked:
//
//	PRESENCED_DEMO_PNG=$PWD/docs/demo.png go test ./web -run TestDemoScreenshot
func TestDemoScreenshot(t *testing.T) {
	out := os.Getenv("PRESENCED_DEMO_PNG")
	if out == "" {
		t.Skip("set PRESENCED_DEMO_PNG to the PNG to write")
	}
	chromium := needChromium(t)
	srv := startPresenced(t)
	b := startBrowser(t, chromium)
	a := b.ctx
	bob := b.tab("page 2")
	do(t, bob, "open bob", chromedp.EmulateViewport(800, 700), chromedp.Navigate(srv.URL+"/?uid=bob"),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	do(t, a, "open the page", chromedp.EmulateViewport(1280, 800), colorScheme("light"), chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)),
		chromedp.SetValue(chromedp.CSS("#spawn-n"), "6"), chromedp.Click(chromedp.CSS("#spawn")))
	waitJS(t, a, "6 live", `document.querySelectorAll('#sims .sim[data-state="live"]').length === 6`, e2eWait)
	do(t, a, "chat", chromedp.Sleep(1500*time.Millisecond),
		chromedp.SendKeys(chromedp.CSS("#chat-text"), "hello! watch the silenced ones go idle and drop"), chromedp.Click(chromedp.CSS("#chat-send")))
	do(t, bob, "reply", chromedp.Sleep(800*time.Millisecond),
		chromedp.SendKeys(chromedp.CSS("#chat-text"), "I see them on my ring too"), chromedp.Click(chromedp.CSS("#chat-send")))
	// Three silenced clients, staggered so that the picture has each stage:
	// one dropped with 4408, one idle (pinged), one still counting down.
	silence := func(n int) chromedp.Action[chromedp.Void] {
		return chromedp.Click(chromedp.CSS(fmt.Sprintf(`#sims .sim:nth-child(%d) button[data-act="silence"]`, n)))
	}
	do(t, a, "silence 2", silence(2))
	do(t, a, "silence 3", chromedp.Sleep(16*time.Second), silence(3))
	do(t, a, "silence 4", chromedp.Sleep(10*time.Second), silence(4))
	waitJS(t, a, "a dropped client", `!!document.querySelector('#sims .sim[data-state="closed"]')`, 15*time.Second)
	// Park the mouse off the buttons so none is drawn hovered.
	do(t, a, "settle", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 2, 790), chromedp.Sleep(1500*time.Millisecond))
	screenshot(t, a, out)
	assert.Empty(t, b.errors(), "console errors or exceptions")
}
