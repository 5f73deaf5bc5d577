package web_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/nginxtest"
)

// sseClock is put in the page before its scripts run: it notes when the
// client opens its first WebSocket, when it first asks for a stream (that
// WebSocket has failed by then) and when the other user is first drawn in
// the lobby, from the stream's first presence, in ms since navigation
// started.
const sseClock = `window.__sse = { ws: 0, stream: 0, presence: 0 };
{
  const WS = window.WebSocket;
  window.WebSocket = class extends WS {
    constructor(...args) {
      super(...args);
      if (!window.__sse.ws) window.__sse.ws = performance.now();
    }
  };
  const fetch0 = window.fetch;
  window.fetch = function (input, init) {
    const u = new URL(String(input && input.url || input), location.href);
    if (u.pathname.endsWith('/sse') && !window.__sse.stream) window.__sse.stream = performance.now();
    return fetch0.apply(this, arguments);
  };
  new MutationObserver(() => {
    if (!window.__sse.presence && document.querySelector('#members li[data-uid="e2e-sse-bob"]')) window.__sse.presence = performance.now();
  }).observe(document, { childList: true, subtree: true });
}`

// TestE2EPageFallsBackToSSE opens the page in a real Chromium through nginx
// with a plain proxy_pass (no upgrade headers, so no WebSocket opens): the
// client falls back to Server-Sent Events by itself, says so, shows itself
// and a WebSocket user online in the lobby, chats both ways, and goes
// offline when its tab closes. It logs how long the fallback takes.
func TestE2EPageFallsBackToSSE(t *testing.T) {
	chromium := needChromium(t)
	if _, err := nginxtest.Find(); err != nil {
		needNginx(t, err)
	}
	// nginx sends its upstream's name as the Host, so presenced is told of
	// it, and of nginx's address as the pages' origin.
	front := nginxtest.FreeAddr(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String(),
		"-hosts", nginxtest.Upstream, "-origins", "http://"+front)
	proxy := nginxtest.StartAt(t, front, srv.Addr)

	const me, bob = "e2e-sse-alice", "e2e-sse-bob"
	other := dialWS(t, srv, bob, "lobby") // straight to presenced, over a WebSocket
	b := startBrowser(t, chromium)
	do(t, b.ctx, "a first tab", chromedp.Navigate("about:blank"))
	tab, closeTab := chromedp.NewContext(b.ctx)
	defer closeTab()
	b.watch("alice", tab)

	start := time.Now()
	do(t, tab, "open the page through nginx",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: sseClock})
			return err
		}),
		chromedp.Navigate(proxy.URL+"/?uid="+me),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	waitJS(t, tab, "bob drawn in the lobby", has(member(bob))+` && !!window.__sse.presence`, e2eWait)
	wall := time.Since(start)
	assert.Equal(t, "via SSE", eval[string](t, tab, text("#me-transport")))
	waitJS(t, tab, "alice herself in the lobby", has(member(me)), e2eWait)
	assert.True(t, srv.online(t, me), "alice online at the server")
	clock := eval[map[string]float64](t, tab, `window.__sse`)
	require.NotZero(t, clock["stream"], "the page asked for a stream")
	require.NotZero(t, clock["ws"], "the page tried a WebSocket")
	t.Logf("through nginx, in ms after navigation started: WebSocket opened at %.0f, refused and a stream asked for at %.0f (+%.0f), "+
		"bob drawn from the stream's first presence at %.0f (+%.0f after the WebSocket, +%.0f after the stream's request); %v wall clock from Navigate",
		clock["ws"], clock["stream"], clock["stream"]-clock["ws"], clock["presence"], clock["presence"]-clock["ws"], clock["presence"]-clock["stream"],
		wall.Round(time.Millisecond))

	// The page chats over POSTs, and hears a chat on its stream.
	do(t, tab, "chat", chromedp.SendKeys(chromedp.CSS("#chat-text"), "over a stream"), chromedp.Click(chromedp.CSS("#chat-send")))
	got := other.next("chat")
	for got.From != me {
		got = other.next("chat")
	}
	assert.Equal(t, wsFrame{Type: "chat", Channel: "lobby", From: me, Text: "over a stream"},
		wsFrame{Type: got.Type, Channel: got.Channel, From: got.From, Text: got.Text}, "%s", got)
	other.send(map[string]string{"type": "chat", "channel": "lobby", "text": "over a WebSocket"})
	waitJS(t, tab, "bob's chat on the page", has(`#chat li[data-channel="lobby"][data-from="e2e-sse-bob"]`), e2eWait)

	// The stream outlives the timeout: the client's pings are POSTs.
	time.Sleep(2 * e2eTimeout)
	assert.True(t, srv.online(t, me), "alice still online after twice the timeout")
	assert.Equal(t, "live", eval[string](t, tab, `document.getElementById('me').dataset.state`))

	closed := time.Now()
	closeTab()
	require.Eventually(t, func() bool { return !srv.online(t, me) }, e2eWait, 10*time.Millisecond, "alice offline once her tab closed")
	for f := other.next("presence"); ; f = other.next("presence") {
		if len(f.Leaves) == 1 && f.Leaves[0] == me {
			break
		}
	}
	t.Logf("alice offline %v after her tab closed", time.Since(closed).Round(time.Millisecond))

	// The only errors are Chromium's reports of the refused WebSocket.
	var refused int
	for _, e := range b.errors() {
		if strings.Contains(e, "WebSocket connection to ") && strings.Contains(e, "failed") {
			refused++
			continue
		}
		t.Errorf("console: %s", e)
	}
	assert.NotZero(t, refused, "Chromium reported the WebSocket it could not open")

	// nginx logs a request once it is over: the stream's, once the tab closed.
	var ws, streams int
	require.Eventually(t, func() bool { return strings.Contains(strings.Join(proxy.Requests(), "\n"), "GET /sse ") },
		e2eWait, 10*time.Millisecond, "the stream in nginx's log")
	for _, line := range proxy.Requests() {
		switch f := strings.Fields(line); {
		case len(f) == 4 && f[1] == "/ws":
			ws++
			assert.Equal(t, "426", f[2], "the upgrade dropped: %s", line)
		case len(f) == 4 && f[1] == "/sse":
			streams++
		}
	}
	assert.Equal(t, 1, ws, "one WebSocket tried: %v", proxy.Requests())
	assert.Equal(t, 1, streams, "one stream: %v", proxy.Requests())
}

// needNginx skips a test without nginx, except in CI, where it fails.
func needNginx(t *testing.T, err error) {
	t.Helper()
	msg := "no nginx (apt-get install nginx): " + err.Error()
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI is set, so this is a failure")
	}
	t.Skip(msg)
}
