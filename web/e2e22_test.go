package web_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the page shows of protocol v2.2, in a real Chromium against a real
// presenced on the short e2e ring: the status picker (do not disturb,
// invisible, a note that clears by itself) as another page sees it, and
// people named by their token's info.

// recordState is GET /api/presence/{uid} with the v2.2 fields.
type recordState struct {
	Online bool   `json:"online"`
	Mode   string `json:"mode"`
	Note   *struct {
		Text  string `json:"text"`
		Emoji string `json:"emoji"`
		Until int64  `json:"until"`
	} `json:"note"`
}

func (s *server) record(t *testing.T, uid string) recordState {
	t.Helper()
	var r recordState
	s.getJSON(t, "/api/presence/"+uid, &r)
	return r
}

func modeButton(mode string) string { return `#status-modes button[data-mode=` + q(mode) + `]` }

// visible is a predicate: the element sel is there and drawn.
func visible(sel string) string {
	return `(document.querySelector(` + q(sel) + `)?.checkVisibility() ?? false)`
}

// TestDemoStatusPicker drives the status picker of one page and watches
// another: do not disturb shows as a badge in the member list and the
// watch list; a note that clears after a few seconds shows with a countdown
// that runs, and goes when the server clears it, not before its until;
// invisible takes the user off the other page (offline, in no room) while
// its own page still lists it; online brings it back.
func TestDemoStatusPicker(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	b := startBrowser(t, chromium)
	ann, ben := b.ctx, b.tab("ben")
	const benID = "e2e22-ben"
	openPage(t, ann, srv, "e2e22-ann")
	openPage(t, ben, srv, benID)
	waitJS(t, ann, "ben listed", has(member(benID)), e2eWait)
	do(t, ann, "watch ben", chromedp.SendKeys(chromedp.CSS("#watch-uid"), benID), chromedp.Click(chromedp.CSS("#watch")))
	waitJS(t, ann, "ben watched, online", has(watchedRow(benID)+`[data-online="online"]`), e2eWait)
	assert.Equal(t, "online", eval[string](t, ann, `document.querySelector(`+q(member(benID))+`).dataset.mode`))
	assert.False(t, eval[bool](t, ann, visible(member(benID)+" .dnd")), "no badge while online")
	assert.Equal(t, "true", eval[string](t, ben, `document.querySelector(`+q(modeButton("online"))+`).getAttribute('aria-pressed')`))

	// Do not disturb: a badge on the other page, in both lists.
	do(t, ben, "ben picks do not disturb", chromedp.Click(chromedp.CSS(modeButton("dnd"))))
	waitJS(t, ben, "ben's card says dnd", has(`#status-card[data-mode="dnd"]`), e2eWait)
	assert.Equal(t, "true", eval[string](t, ben, `document.querySelector(`+q(modeButton("dnd"))+`).getAttribute('aria-pressed')`))
	assert.Equal(t, "dnd", srv.record(t, benID).Mode, "the server took it")
	waitJS(t, ann, "the dnd badge in the member list", visible(member(benID)+`[data-mode="dnd"] .dnd`), e2eWait)
	waitJS(t, ann, "the dnd badge in the watch list", visible(watchedRow(benID)+`[data-mode="dnd"] .dnd`), e2eWait)
	assert.Equal(t, "dnd", eval[string](t, ann, text(member(benID)+" .dnd")))
	waitJS(t, ann, "ben's status logged", has(logged("status", benID)), e2eWait)
	assert.Contains(t, eval[string](t, ann, text(logged("status", benID))), "do not disturb")
	assert.True(t, eval[bool](t, ann, visible(member(benID)+" .uid")), "no name in demo mode: the ID names him")
	assert.False(t, eval[bool](t, ann, visible(member(benID)+" .name")))

	// A note that clears by itself: a choice of a few seconds, added for the test.
	const noteMS = 6000
	eval[bool](t, ben, `(() => { const s = document.getElementById('note-clear'); s.add(new Option('6 s', '`+strconv.Itoa(noteMS)+`')); s.value = '`+strconv.Itoa(noteMS)+`'; return true; })()`)
	do(t, ben, "ben writes a note", chromedp.SetValue(chromedp.CSS("#note-emoji"), "📅"), chromedp.SetValue(chromedp.CSS("#note-text"), "In a meeting"),
		chromedp.Click(chromedp.CSS("#note-set")))
	note := member(benID) + " .note-view"
	waitJS(t, ann, "ben's note on ann's page", visible(note), e2eWait)
	assert.Equal(t, "In a meeting", eval[string](t, ann, text(note+" .text")))
	assert.Equal(t, "📅", eval[string](t, ann, text(note+" .emoji")))
	assert.True(t, eval[bool](t, ann, visible(member(benID)+" .dnd")), "the note leaves the mode as it was")
	until, err := strconv.ParseInt(eval[string](t, ann, `document.querySelector(`+q(note)+`).dataset.until`), 10, 64)
	require.NoError(t, err, "the note has an until")
	server := srv.record(t, benID)
	require.NotNil(t, server.Note, "the server holds the note")
	assert.Equal(t, until, server.Note.Until, "the page shows the server's until")
	assert.Equal(t, "In a meeting", server.Note.Text)
	waitJS(t, ben, "the note on ben's own card", visible("#my-status .note-view"), e2eWait)
	assert.Equal(t, "In a meeting", eval[string](t, ben, text("#my-status .note-view .text")))

	// The countdown runs, and the note goes after its until and not before.
	left := eval[string](t, ann, text(note+" .left"))
	assert.Regexp(t, `^0:0[0-6]$`, left)
	waitJS(t, ann, "the countdown to move", `(`+text(note+" .left")+`) !== `+q(left)+` && (`+text(note+" .left")+`) !== ''`, e2eWait)
	gone := `(() => {
		const el = document.querySelector(` + q(note) + `);
		const hidden = !el || el.hidden;
		if (hidden && Date.now() < ` + strconv.FormatInt(until, 10) + `) window.e2eEarly = true;
		return hidden && presenced.record(` + q(benID) + `)?.note === undefined;
	})()`
	waitJS(t, ann, "the note gone, cleared by the server", gone, e2eWait+noteMS*time.Millisecond)
	assert.False(t, eval[bool](t, ann, `!!window.e2eEarly`), "the note went before its until")
	assert.Nil(t, srv.record(t, benID).Note, "cleared at the server")
	assert.Equal(t, "dnd", srv.record(t, benID).Mode)
	waitJS(t, ben, "the note gone from ben's own card", `!`+visible("#my-status .note-view"), e2eWait)

	// Invisible: gone from ann's page, still on ben's own.
	do(t, ben, "ben picks invisible", chromedp.Click(chromedp.CSS(modeButton("invisible"))))
	waitJS(t, ben, "ben's card says invisible", has(`#status-card[data-mode="invisible"]`), e2eWait)
	waitJS(t, ann, "ben gone from the lobby", hasNo(member(benID)), e2eWait)
	waitJS(t, ann, "ben offline in the watch list", has(watchedRow(benID)+`[data-online="offline"]`), e2eWait)
	assert.False(t, eval[bool](t, ann, visible(watchedRow(benID)+" .dnd")), "nothing of his mode is shown")
	assert.True(t, eval[bool](t, ann, `presenced.record(`+q(benID)+`) === undefined`), "ann's client keeps no record of him")
	assert.False(t, srv.record(t, benID).Online, "offline to the API without a key")
	assert.True(t, eval[bool](t, ben, has(member(benID))), "ben's own page still lists him")
	assert.Equal(t, "you · invisible", eval[string](t, ben, text(member(benID)+" .tag")))
	assert.Contains(t, eval[string](t, ben, text("#my-status")), "invisible")
	waitJS(t, ben, "the pill says invisible", `(`+text("#me-pill .pill-text")+`) === `+q("invisible as "+benID), e2eWait)

	// Online again: back on ann's page, the badge gone with the mode.
	do(t, ben, "ben picks online", chromedp.Click(chromedp.CSS(modeButton("online"))))
	waitJS(t, ann, "ben back in the lobby", has(member(benID)+`[data-mode="online"]`), e2eWait)
	waitJS(t, ann, "ben online in the watch list", has(watchedRow(benID)+`[data-online="online"][data-mode="online"]`), e2eWait)
	assert.False(t, eval[bool](t, ann, visible(member(benID)+" .dnd")))
	waitJS(t, ben, "the pill says online", `(`+text("#me-pill .pill-text")+`) === `+q("online as "+benID), e2eWait)
	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestDemoStatusAfterReload checks that the picker starts from what the
// server keeps: a reload comes back in do not disturb, with its note; and
// that a simulated client can be put in do not disturb too.
func TestDemoStatusAfterReload(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	b := startBrowser(t, chromium)
	a := b.ctx
	openPage(t, a, srv, "e2e22-cat")
	do(t, a, "do not disturb", chromedp.Click(chromedp.CSS(modeButton("dnd"))))
	waitJS(t, a, "dnd", has(`#status-card[data-mode="dnd"]`), e2eWait)
	do(t, a, "a note that does not clear", chromedp.SendKeys(chromedp.CSS("#note-text"), "Heads down"), chromedp.Click(chromedp.CSS("#note-set")))
	waitJS(t, a, "the note on the card", visible("#my-status .note-view"), e2eWait)
	assert.False(t, eval[bool](t, a, visible("#my-status .note-view .left")), "no countdown without an until")
	require.Eventually(t, func() bool { r := srv.record(t, "e2e22-cat"); return r.Note != nil && r.Mode == "dnd" }, e2eWait, 10*time.Millisecond)

	do(t, a, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	waitJS(t, a, "dnd from the welcome", has(`#status-card[data-mode="dnd"]`)+` && `+visible("#my-status .note-view"), e2eWait)
	assert.Equal(t, "Heads down", eval[string](t, a, text("#my-status .note-view .text")))
	assert.Equal(t, "true", eval[string](t, a, `document.querySelector(`+q(modeButton("dnd"))+`).getAttribute('aria-pressed')`))
	waitJS(t, a, "own row with the badge", visible(member("e2e22-cat")+" .dnd"), e2eWait)

	do(t, a, "clear the note", chromedp.Click(chromedp.CSS("#note-remove")))
	waitJS(t, a, "the note cleared", `!`+visible("#my-status .note-view"), e2eWait)
	require.Eventually(t, func() bool { return srv.record(t, "e2e22-cat").Note == nil }, e2eWait, 10*time.Millisecond)
	assert.Equal(t, "dnd", srv.record(t, "e2e22-cat").Mode, "clearing the note leaves the mode")

	// A simulated client has a do-not-disturb switch of its own.
	do(t, a, "spawn 1", chromedp.SetValue(chromedp.CSS("#spawn-n"), "1"), chromedp.Click(chromedp.CSS("#spawn")))
	waitJS(t, a, "a live simulated client", has(`#sims .sim[data-state="live"]`), e2eWait)
	sim := eval[string](t, a, `document.querySelector('#sims .sim').dataset.uid`)
	row := `#sims .sim[data-uid=` + q(sim) + `]`
	waitJS(t, a, "the simulated client listed", has(member(sim)), e2eWait)
	do(t, a, "its DND", chromedp.Click(chromedp.CSS(row+` button[data-act="dnd"]`)))
	waitJS(t, a, "its badge in the member list", visible(member(sim)+" .dnd"), e2eWait)
	assert.Equal(t, "Online", eval[string](t, a, text(row+` button[data-act="dnd"]`)))
	assert.Equal(t, "dnd", srv.record(t, sim).Mode)
	do(t, a, "back online", chromedp.Click(chromedp.CSS(row+` button[data-act="dnd"]`)))
	waitJS(t, a, "its badge gone", has(member(sim)+`[data-mode="online"]`)+` && !`+visible(member(sim)+" .dnd"), e2eWait)
	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestDemoNamesFromInfo opens two pages with tokens whose info claim names
// the users: each page calls the other by that name, in the member list and
// in the chat, and keeps the ID beside it.
func TestDemoNamesFromInfo(t *testing.T) {
	chromium := needChromium(t)
	const secret = "e2e22-names-secret"
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String(), "-jwt-secret", secret)
	sign := func(sub string, info map[string]any) string {
		claims := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
		if info != nil {
			claims["info"] = info
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		require.NoError(t, err)
		return tok
	}
	b := startBrowser(t, chromium)
	dee, eli := b.ctx, b.tab("eli")
	open := func(ctx context.Context, uid, tok string) {
		do(t, ctx, "open the page as "+uid, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+"/?token="+tok),
			chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
		waitJS(t, ctx, uid+" in the lobby", has(shown("lobby")), e2eWait)
	}
	open(dee, "e2e22-dee", sign("e2e22-dee", map[string]any{"name": "Dee Dee"}))
	open(eli, "e2e22-eli", sign("e2e22-eli", map[string]any{"name": "Eli <b>Stone</b>"}))
	// A user whose token has no info, on a bare socket that answers the server's pings.
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	fox, res, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws?channels=lobby&token="+sign("e2e22-fox", nil), nil)
	require.NoError(t, err)
	res.Body.Close()
	t.Cleanup(func() { fox.Close() })
	go func() {
		for {
			if _, _, err := fox.ReadMessage(); err != nil {
				return
			}
		}
	}()

	waitJS(t, dee, "eli listed by name", `(`+text(member("e2e22-eli")+" .name")+`) === "Eli <b>Stone</b>"`, e2eWait)
	assert.Zero(t, eval[int](t, dee, `document.querySelectorAll('#members b').length`), "a name is text, not HTML")
	assert.True(t, eval[bool](t, dee, visible(member("e2e22-eli")+" .uid")), "the ID stays beside the name")
	assert.Equal(t, "e2e22-eli", eval[string](t, dee, text(member("e2e22-eli")+" .uid")))
	waitJS(t, dee, "fox listed", has(member("e2e22-fox")), e2eWait)
	assert.False(t, eval[bool](t, dee, visible(member("e2e22-fox")+" .name")), "no info: the ID alone")
	waitJS(t, eli, "dee listed by name", `(`+text(member("e2e22-dee")+" .name")+`) === "Dee Dee"`, e2eWait)
	waitJS(t, dee, "its own name", `(`+text(member("e2e22-dee")+" .name")+`) === "Dee Dee"`, e2eWait)

	do(t, eli, "eli says hello", chromedp.SendKeys(chromedp.CSS("#chat-text"), "hello"), chromedp.Click(chromedp.CSS("#chat-send")))
	sel := `#chat li[data-from="e2e22-eli"] .head code`
	waitJS(t, dee, "eli's message, by name", has(sel), e2eWait)
	assert.Equal(t, "Eli <b>Stone</b>", eval[string](t, dee, text(sel)))
	assert.Equal(t, "e2e22-eli", eval[string](t, dee, `document.querySelector(`+q(sel)+`).title`))
	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestModules22InBrowser runs the helpers behind the status picker: the
// countdown's format and the until of each "clear after" choice.
func TestModules22InBrowser(t *testing.T) {
	b, _, run := moduleBrowser(t)
	var left []string
	run(t, `import('/format.js').then(m => [0, 999, 1000, 45000, 59999, 60000, 1799000, 3600000, 14399000, 86400000, 93600000, -5].map(m.fmtLeft))`, &left)
	assert.Equal(t, []string{"0:00", "0:01", "0:01", "0:45", "1:00", "1:00", "29:59", "1:00:00", "3:59:59", "1 d", "1 d 2 h", "0:00"}, left)

	var at struct {
		Never, Half, Today, Bad int64
		Midnight                bool
	}
	run(t, `import('/format.js').then(m => {
		const now = new Date(2026, 10, 26, 21, 30, 0).getTime();
		const today = m.clearAt('today', now);
		const d = new Date(today);
		return {never: m.clearAt('', now), half: m.clearAt('1800000', now) - now, today: today - now, bad: m.clearAt('soon', now),
			midnight: d.getHours() === 0 && d.getMinutes() === 0 && d.getDate() === 27};
	})`, &at)
	assert.Equal(t, int64(0), at.Never)
	assert.Equal(t, int64(1800000), at.Half)
	assert.Equal(t, int64(150*60000), at.Today, "to the coming midnight")
	assert.True(t, at.Midnight)
	assert.Equal(t, int64(0), at.Bad)

	var n []int
	run(t, `import('/format.js').then(m => ['', 'abc', '📅', '🙂'.repeat(16), 'é'].map(m.codePoints))`, &n)
	assert.Equal(t, []int{0, 3, 1, 16, 1}, n)

	// A watching answer's last_seen gives the watch list the last seen of those offline.
	var seen map[string]float64
	run(t, `import('/rooms.js').then(m => {
		const w = new m.WatchList();
		for (const u of ['on', 'gone', 'ghost', 'junk']) w.add(u);
		w.watching({type: 'watching', online: ['on'], last_seen: {gone: 1764000000000, on: 1, junk: 'noon', mallory: 5}}, 1);
		return Object.fromEntries([...w.users].map(([u, s]) => [u, s.lastSeen]));
	})`, &seen)
	assert.Equal(t, map[string]float64{"on": 0, "gone": 1764000000000, "ghost": 0, "junk": 0}, seen)
	assert.Empty(t, b.errors(), "console errors or exceptions")
}
