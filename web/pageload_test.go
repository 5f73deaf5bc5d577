package web_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestE2EHealthyLoadIsClean opens the page where nothing is wrong, in demo
// mode and with a good token, and checks that the browser logged no error
// at all (no filter: the probe at load included) and that no request was
// answered with an error status or failed.
func TestE2EHealthyLoadIsClean(t *testing.T) {
	chromium := needChromium(t)
	const secret = "e2e-clean-secret"
	demo := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	tokens := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String(), "-jwt-secret", secret)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "e2e-tess", "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString([]byte(secret))
	require.NoError(t, err)

	b := startBrowser(t, chromium)
	for _, tc := range []struct {
		name, url, mode string
	}{
		{"demo mode", demo.URL + "/?uid=e2e-dora", "demo"},
		{"token", tokens.URL + "/?token=" + tok, "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := b.tab(tc.name)
			failed := watchRequests(tab)
			do(t, tab, "open the page", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(tc.url),
				chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
			waitJS(t, tab, "the lobby joined", has(shown("lobby")), e2eWait)
			assert.Equal(t, tc.mode, eval[string](t, tab, `document.body.dataset.mode`))
			// The ring is polled: a few of its answers come in too.
			waitJS(t, tab, "the ring drawn", `document.querySelectorAll('#ring .slot').length > 0`, e2eWait)
			assert.Empty(t, failed(), "requests answered with an error or failed")
			assert.Empty(t, consoleOf(b, tc.name), "console errors or exceptions, unfiltered")
		})
	}
}

// TestE2EWatchedNeverSeen watches a user the server has never seen: the
// Watching panel says so instead of how long ago the watch began, and a
// user seen going offline shows its last seen.
func TestE2EWatchedNeverSeen(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	b := startBrowser(t, chromium)
	a := b.ctx
	openPage(t, a, srv, "e2e-wanda")
	for _, u := range []string{"e2e-ghost", "e2e-gone"} {
		do(t, a, "watch "+u, chromedp.SendKeys(chromedp.CSS("#watch-uid"), u), chromedp.Click(chromedp.CSS("#watch")))
	}
	waitJS(t, a, "the ghost never seen", `(`+text(watchedRow("e2e-ghost")+" .seen")+`) === "never seen"`, e2eWait)
	assert.Equal(t, "offline", eval[string](t, a, `document.querySelector(`+q(watchedRow("e2e-ghost"))+`).dataset.online`))

	gone := dialWS(t, srv, "e2e-gone", "lobby")
	waitJS(t, a, "gone online", has(watchedRow("e2e-gone")+`[data-online="online"]`), e2eWait)
	gone.close()
	waitJS(t, a, "gone last seen", `(`+text(watchedRow("e2e-gone")+" .seen")+`).startsWith("last seen ")`, e2eWait)
	assert.Equal(t, "never seen", eval[string](t, a, text(watchedRow("e2e-ghost")+" .seen")), "still never seen")
	assert.Empty(t, consoleOf(b, "page 1"), "console errors or exceptions, unfiltered")
}

// consoleOf returns every console error and exception of one tab, with no
// exception made.
func consoleOf(b *browser, tab string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, e := range b.console {
		if e.tab == tab {
			out = append(out, e.String())
		}
	}
	return out
}

// watchRequests records the requests of a tab that failed or were answered
// with a status of 400 or more, from now on; it returns what it recorded.
func watchRequests(ctx context.Context) func() []string {
	var mu sync.Mutex
	var bad []string
	record := func(s string) {
		mu.Lock()
		bad = append(bad, s)
		mu.Unlock()
	}
	answers := chromedp.Events(ctx, network.ResponseReceived)
	failures := chromedp.Events(ctx, network.LoadingFailed)
	go func() {
		for ev, err := range answers {
			if err != nil {
				return
			}
			if ev.Response != nil && ev.Response.Status >= 400 {
				record(fmt.Sprintf("%d %s", ev.Response.Status, ev.Response.URL))
			}
		}
	}()
	go func() {
		for ev, err := range failures {
			if err != nil {
				return
			}
			record(fmt.Sprintf("failed: %s (%s)", ev.ErrorText, ev.Type))
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bad...)
	}
}
