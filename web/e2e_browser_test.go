package web_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

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
			b.t.Logf("expected (a planned outage or the page's probe at load): %s", e)
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
	if probe(m) {
		return true
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

// probe reports whether m is the browser's report of the page's questions
// at load, on a server that needs a token (or an API key) and a page given
// none: Chromium logs every 4xx answer. A healthy load asks nothing that
// fails; then come the count of users refused (401 or 403) and a heartbeat
// with no identity (400 in demo mode, 401 when tokens are needed).
func probe(m chromedp.ConsoleMessage) bool {
	u, err := url.Parse(m.URL)
	if err != nil || m.Source != "network" {
		return false
	}
	status := func(codes ...string) bool {
		for _, c := range codes {
			if strings.Contains(m.Text, "status of "+c) {
				return true
			}
		}
		return false
	}
	switch {
	case u.Path == "/api/presence" && u.RawQuery == "limit=0":
		return status("401", "403")
	case u.Path == "/api/heartbeat" && u.RawQuery == "":
		return status("400", "401")
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

// artifactPath is where a screenshot goes: $PRESENCED_ARTIFACTS when set,
// so CI can keep it, else presenced-artifacts in the system's temporary
// directory, which outlives the test as t.TempDir does not.
func artifactPath(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("PRESENCED_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "presenced-artifacts")
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

// Selectors of the page, for the waits below.
func member(uid string) string { return `#members li[data-uid=` + q(uid) + `]` }
func logged(kind, uid string) string {
	return `#log li[data-kind=` + q(kind) + `][data-uid=` + q(uid) + `]`
}
func has(sel string) string    { return `!!document.querySelector(` + q(sel) + `)` }
func hasNo(sel string) string  { return `!document.querySelector(` + q(sel) + `)` }
func text(sel string) string   { return `document.querySelector(` + q(sel) + `)?.textContent ?? ''` }
func roomTab(ch string) string { return `#room-tabs button[data-channel=` + q(ch) + `]` }

// shown is the room the member list and the chat show, with its state.
func shown(ch string) string {
	return `#rooms-card[data-channel=` + q(ch) + `][data-state="joined"]`
}
