package web_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
)

// TestDemoScreenshot renders docs/demo.png against presenced with its default
// ring (31 slots of 1 s) and snapshot size (100 names): a lobby of about 120
// members listed 100 at a time, members away, a watched user away and one
// last seen, someone typing, and simulated clients at each stage of going
// idle. It takes about 40 s and needs a server that relays typing, so it
// runs only when asked:
//
//	PRESENCED_DEMO_PNG=$PWD/docs/demo.png go test ./web -run TestDemoScreenshot
func TestDemoScreenshot(t *testing.T) {
	out := os.Getenv("PRESENCED_DEMO_PNG")
	if out == "" {
		t.Skip("set PRESENCED_DEMO_PNG to the PNG to write")
	}
	chromium := needChromium(t)
	srv := startPresenced(t)
	// carol was here a moment ago: the watch list shows her last seen.
	dialWS(t, srv, "carol").close()
	dana := dialWS(t, srv, "dana", "lobby")
	b := startBrowser(t, chromium)
	a := b.ctx
	bob := b.tab("page 2")
	do(t, bob, "open bob", chromedp.EmulateViewport(800, 700), chromedp.Navigate(srv.URL+"/?uid=bob"),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	do(t, a, "open the page", chromedp.EmulateViewport(1280, 800), colorScheme("light"), chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	// More simulated clients than a snapshot lists: the lobby is paged.
	for _, n := range []string{"100", "16"} {
		do(t, a, "spawn "+n, chromedp.SetValue(chromedp.CSS("#spawn-n"), n), chromedp.Click(chromedp.CSS("#spawn")))
	}
	waitJS(t, a, "116 live", `document.querySelectorAll('#sims .sim[data-state="live"]').length === 116`, e2eWait)
	// The lobby grew under the page's eyes, so its list is complete; a new
	// connection gets a snapshot of the first 100 and pages the rest.
	do(t, a, "disconnect", chromedp.Click(chromedp.CSS("#me-toggle")))
	waitJS(t, a, "closed", `document.getElementById('me').dataset.state === "closed"`, e2eWait)
	do(t, a, "connect", chromedp.Click(chromedp.CSS("#me-toggle")))
	waitJS(t, a, "live in the lobby", `document.getElementById('me').dataset.state === "live" && `+has(shown("lobby")), e2eWait)
	// A second room, then back to the lobby; bob watched (online) and carol (offline).
	do(t, a, "join a room", chromedp.SendKeys(chromedp.CSS("#join-name"), "design"), chromedp.Click(chromedp.CSS("#join")))
	waitJS(t, a, "design joined", has(shown("design")), e2eWait)
	do(t, a, "back to the lobby", chromedp.Click(chromedp.CSS(roomTab("lobby"))))
	waitJS(t, a, "the lobby shown", has(shown("lobby")), e2eWait)
	for _, u := range []string{"bob", "carol"} {
		do(t, a, "watch "+u, chromedp.SendKeys(chromedp.CSS("#watch-uid"), u), chromedp.Click(chromedp.CSS("#watch")))
	}
	waitJS(t, a, "bob online", has(`#watched li[data-uid="bob"][data-online="online"]`), e2eWait)
	waitJS(t, a, "carol last seen", `(document.querySelector('#watched li[data-uid="carol"]')?.dataset.lastSeen ?? '') !== ''`, e2eWait)
	waitJS(t, a, "the lobby listed 100 at a time", `document.getElementById('room-count').textContent === "119"`+
		` && document.getElementById('room-more').checkVisibility()`, e2eWait)
	do(t, a, "chat", chromedp.Sleep(1500*time.Millisecond),
		chromedp.SendKeys(chromedp.CSS("#chat-text"), "hello! watch the silenced ones go idle and drop"), chromedp.Click(chromedp.CSS("#chat-send")))
	do(t, bob, "reply", chromedp.Sleep(800*time.Millisecond),
		chromedp.SendKeys(chromedp.CSS("#chat-text"), "I see them on my ring too. Back in a bit"), chromedp.Click(chromedp.CSS("#chat-send")))
	// Three silenced clients, staggered so that the picture has each stage:
	// one dropped with 4408, one idle (pinged), one still counting down.
	act := func(n int, what string) chromedp.Action[chromedp.Void] {
		return chromedp.Click(chromedp.CSS(fmt.Sprintf(`#sims .sim:nth-child(%d) button[data-act=%q]`, n, what)))
	}
	do(t, a, "silence 2", act(2, "silence"))
	do(t, a, "bob goes away", chromedp.Sleep(time.Second))
	do(t, bob, "bob goes away", chromedp.Click(chromedp.CSS("#me-away")))
	do(t, a, "two go away", act(5, "away"), act(6, "away"))
	do(t, a, "silence 3", chromedp.Sleep(15*time.Second), act(3, "silence"))
	do(t, a, "silence 4", chromedp.Sleep(10*time.Second), act(4, "silence"))
	waitJS(t, a, "a dropped client", `!!document.querySelector('#sims .sim[data-state="closed"]')`, e2eWait)
	waitJS(t, a, "bob away", has(`#watched li[data-uid="bob"][data-away="true"]`), e2eWait)
	waitJS(t, a, "two dimmed", `document.querySelectorAll('#members li.away').length >= 2`, e2eWait)
	// Park the mouse off the buttons so none is drawn hovered.
	do(t, a, "settle", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 2, 790), chromedp.Sleep(1500*time.Millisecond))
	// Last, as a typing mark lasts seconds.
	dana.send(map[string]string{"type": "typing", "channel": "lobby"})
	waitJS(t, a, "dana typing", `document.getElementById('typing').textContent === "dana is typing…"`, e2eWait)
	screenshot(t, a, out)
	assert.Empty(t, b.errors(), "console errors or exceptions")
}
