package web_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestE2ELargeRoom checks how the page shows a room too big to list: the
// snapshot is bounded (count exact, fewer names) and the diffs carry the
// count only. The server is told that 2 names is big.
func TestE2ELargeRoom(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String(), "-member-list", "2", "-presence-lists", "2")
	for _, u := range []string{"big-1", "big-2", "big-3"} {
		dialWS(t, srv, u, "lobby")
	}
	b := startBrowser(t, chromium)
	a := b.ctx
	do(t, a, "open the page", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+"/?uid=big-page"),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	waitJS(t, a, "the lobby joined", has(shown("lobby")), e2eWait)
	assert.Equal(t, "4", eval[string](t, a, text("#room-count")), "the count is exact")
	assert.Equal(t, 2, eval[int](t, a, `document.querySelectorAll('#members li[data-uid]').length`), "the snapshot's 2 names")
	assert.Equal(t, "true", eval[string](t, a, `document.getElementById('rooms-card').dataset.partial`))
	assert.Contains(t, eval[string](t, a, text("#room-note")), "members, showing 2")
	assert.Contains(t, eval[string](t, a, text("#members li.more")), "2 more")

	dialWS(t, srv, "big-4", "lobby")
	waitJS(t, a, "the count-only diff", `document.getElementById('room-count').textContent === "5"`, e2eWait)
	assert.Contains(t, eval[string](t, a, text("#room-note")), "counts, not names")
	assert.Equal(t, 2, eval[int](t, a, `document.querySelectorAll('#members li[data-uid]').length`), "the list is kept as it was")
	assert.False(t, eval[bool](t, a, has(logged("join", "big-4"))), "no names in a count-only diff")
	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestE2ETokenRequired opens the page on a server that needs a token: with
// no token the page says so and does not connect, with a refused one it
// says why, with a good one it connects; Spawn, which makes clients without
// tokens, is never offered.
func TestE2ETokenRequired(t *testing.T) {
	chromium := needChromium(t)
	const secret = "e2e-secret"
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String(), "-jwt-secret", secret)
	sign := func(sub string, exp time.Time) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString([]byte(secret))
		require.NoError(t, err)
		return tok
	}
	b := startBrowser(t, chromium)
	a := b.ctx
	spawnHidden := func(t *testing.T, ctx context.Context) {
		t.Helper()
		assert.False(t, eval[bool](t, ctx, `document.getElementById('spawn').checkVisibility()`), "Spawn is not offered")
		assert.False(t, eval[bool](t, ctx, `document.getElementById('silence-one').checkVisibility()`), "nor Silence one")
		assert.Contains(t, eval[string](t, ctx, text("#sims-off")), "need a server in demo mode")
	}

	t.Run("no token", func(t *testing.T) {
		do(t, a, "open the page", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+"/"))
		waitJS(t, a, "the notice", `document.getElementById('notice').checkVisibility()`, e2eWait)
		assert.Contains(t, eval[string](t, a, text("#notice")), "This server needs a token: open this page with ?token=")
		assert.Equal(t, "token", eval[string](t, a, `document.body.dataset.mode`))
		assert.Equal(t, "needs-token", eval[string](t, a, `document.getElementById('me').dataset.state`))
		assert.Contains(t, eval[string](t, a, text("#me-state")), "needs a token")
		assert.False(t, eval[bool](t, a, `document.getElementById('me-toggle').checkVisibility()`), "no Connect to retry in vain")
		spawnHidden(t, a)
		// The page made no attempt: nothing in the log says it connected or retried.
		assert.False(t, eval[bool](t, a, has(`#log li[data-kind="conn"]`)), "no connection attempts")
	})

	t.Run("expired token", func(t *testing.T) {
		tab := b.tab("expired")
		do(t, tab, "open the page", chromedp.EmulateViewport(1280, 800),
			chromedp.Navigate(srv.URL+"/?token="+sign("e2e-late", time.Now().Add(-time.Hour))))
		waitJS(t, tab, "the notice", `document.getElementById('notice').checkVisibility()`, e2eWait)
		assert.Contains(t, eval[string](t, tab, text("#notice")), "This server refused the token")
		assert.Equal(t, "needs-token", eval[string](t, tab, `document.getElementById('me').dataset.state`))
		spawnHidden(t, tab)
	})

	t.Run("good token", func(t *testing.T) {
		tab := b.tab("token")
		do(t, tab, "open the page", chromedp.EmulateViewport(1280, 800),
			chromedp.Navigate(srv.URL+"/?token="+sign("e2e-erin", time.Now().Add(time.Hour))),
			chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
		assert.Equal(t, "e2e-erin", eval[string](t, tab, text("#me-uid")), "the user is the token's sub")
		waitJS(t, tab, "the lobby joined", has(shown("lobby")), e2eWait)
		assert.True(t, eval[bool](t, tab, `document.getElementById('notice').hidden`), "no notice")
		spawnHidden(t, tab)
	})

	t.Run("token expires while connected", func(t *testing.T) {
		tab := b.tab("expiring")
		// The page must load and connect before exp, which is in whole
		// seconds: 9 to 10 s from now. A few seconds were too few on a busy
		// machine: the token had expired by the upgrade, or the page was
		// live only between two looks.
		do(t, tab, "open the page", chromedp.EmulateViewport(1280, 800),
			chromedp.Navigate(srv.URL+"/?token="+sign("e2e-brief", time.Now().Add(e2eWait/2))),
			chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
		waitJS(t, tab, "the notice", `document.getElementById('notice').checkVisibility()`, e2eWait)
		assert.Contains(t, eval[string](t, tab, text("#notice")), "4401 token expired")
		assert.Contains(t, eval[string](t, tab, text("#me-close")), "4401 token expired")
		assert.NotContains(t, eval[string](t, tab, text(`#log li[data-kind="conn"]`)), "reconnecting", "an expired token is not retried")
	})

	// The browser reports the refused upgrade of the expired token as a
	// failed WebSocket, and the page's question about it as a 401; nothing
	// else may show in the console.
	var unexpected []string
	for _, e := range b.errors() {
		if !(strings.HasPrefix(e, "expired: ") && (strings.Contains(e, "WebSocket connection to ") || strings.Contains(e, "status of 401"))) {
			unexpected = append(unexpected, e)
		}
	}
	assert.Empty(t, unexpected, "console errors or exceptions")
}
