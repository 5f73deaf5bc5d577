package web_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// layoutSizes are the viewports the page must fit: laptops, a desktop and
// a phone.
var layoutSizes = []struct {
	w, h  int
	phone bool
}{
	{1280, 800, false},
	{1366, 768, false},
	{1440, 900, false},
	{1920, 1080, false},
	{390, 844, true},
}

// Long content, at the protocol's limits: a 64-character name and ID, a
// 128-character note with an emoji.
var (
	longName = "Maximiliana Featherstonehaugh-Cholmondeley of Llanfairpwllgwyngy"
	longUID  = "a-user-id-as-long-as-the-protocol-allows-sixty-four-characters-x"
	longNote = "In a meeting about the quarterly roadmap, then lunch with the design team; back around three, ping me if anything is on fire!!!!"
)

// TestPageLayout opens the demo page full of what a busy room holds (200
// members, names and IDs of 64 characters, a 128-character note with an
// emoji in the member list and in the page's own status, dnd, away,
// simulated clients at each stage, watched users online, last seen and
// never seen, chat and typing) at each of layoutSizes, in demo and in
// token mode, and fails on any element whose content overflows its card or
// the page, is clipped without an ellipsis and a title, or is an ID or a
// name broken over two lines. It saves a screenshot of each to the
// artifacts directory (see artifactPath); the one of demo mode at
// 1280×800 is docs/demo.png.
func TestPageLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("drives Chromium through ten layouts: not in -short")
	}
	chromium := needChromium(t)
	for _, mode := range []string{"demo", "token"} {
		t.Run(mode, func(t *testing.T) {
			b := startBrowser(t, chromium)
			tab := b.ctx
			typist := fillPage(t, tab, mode)
			// Not heard yet is not offline: a member whose keepalives the
			// page cannot see has a dashed dot, the page's own a solid one.
			dot := func(sel string) string {
				return eval[string](t, tab, `getComputedStyle(document.querySelector(`+q(sel)+`)).borderTopStyle`)
			}
			assert.Equal(t, "dashed", dot(`#members li[data-uid="member-010"][data-heard="never"] .dot`))
			assert.Equal(t, "solid", dot(`#members li[data-heard="recent"] .dot`))
			if mode == "demo" {
				assert.Equal(t, "dashed", dot(`#watched li[data-uid="never-seen-user"][data-never="true"] .dot`))
				assert.Equal(t, "solid", dot(`#watched li[data-uid="carol"] .dot`), "carol is offline, and seen")
			}
			for _, size := range layoutSizes {
				name := fmt.Sprintf("%dx%d", size.w, size.h)
				t.Run(name, func(t *testing.T) {
					opts := []chromedp.EmulateViewportOption{}
					if size.phone {
						opts = append(opts, chromedp.EmulateMobile)
					}
					// Typing lasts -typing-ttl (5 s): said again for each size.
					typist.send(map[string]string{"type": "typing", "channel": "lobby"})
					do(t, tab, "resize", chromedp.EmulateViewport(int64(size.w), int64(size.h), opts...),
						chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 2, float64(size.h-2)))
					waitJS(t, tab, "someone typing", `document.getElementById('typing').textContent.endsWith('is typing…')`, e2eWait)
					// Two frames: the page redraws on a timer and on resize.
					do(t, tab, "settle", chromedp.Sleep(600*time.Millisecond))
					problems := eval[[]string](t, tab, layoutCheck)
					assert.Empty(t, problems, "%s mode at %s: elements that do not fit", mode, name)
					screenshot(t, tab, artifactPath(t, fmt.Sprintf("layout-%s-%s.png", mode, name)))
				})
			}
			assert.Empty(t, b.errors(), "console errors or exceptions")
		})
	}
	if out := os.Getenv("PRESENCED_DEMO_PNG"); out != "" {
		shot, err := os.ReadFile(artifactPath(t, "layout-demo-1280x800.png"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(out, shot, 0o644))
		t.Logf("docs/demo.png: %s", out)
	}
}

// fillPage starts a server for mode ("demo", or "token" with a JWT
// secret), fills a lobby and opens the page on tab; it returns a member
// that can type.
func fillPage(t *testing.T, tab context.Context, mode string) *wsClient {
	t.Helper()
	var srv *server
	const secret = "layout-test-secret"
	query := func(uid, name string) url.Values {
		q := url.Values{"channels": {"lobby"}}
		if mode == "demo" {
			q.Set("uid", uid)
			return q
		}
		claims := jwt.MapClaims{"sub": uid, "exp": time.Now().Add(time.Hour).Unix(), "watch": []string{"*"}}
		if name != "" {
			claims["info"] = map[string]any{"name": name}
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		require.NoError(t, err)
		q.Set("token", tok)
		return q
	}
	if mode == "demo" {
		srv = startPresenced(t)
	} else {
		srv = startPresenced(t, "-jwt-secret", secret)
	}
	// carol came and went: the watch list shows her last seen.
	carol := query("carol", "Carol")
	carol.Del("channels")
	dialQuery(t, srv, "carol", carol).close()

	members := make([]*wsClient, 0, 200)
	for i := range 200 {
		uid, name := fmt.Sprintf("member-%03d", i), ""
		switch {
		case i == 0:
			uid, name = longUID, longName
		case i%7 == 0:
			name = fmt.Sprintf("Member number %d with a long display name", i)
		case i%3 == 0:
			name = fmt.Sprintf("Member %d", i)
		}
		members = append(members, dialQuery(t, srv, uid, query(uid, name)))
	}
	members[0].send(map[string]any{"type": "set", "mode": "dnd", "note": map[string]any{"text": longNote, "emoji": "📅",
		"until": time.Now().Add(2 * time.Hour).UnixMilli()}})
	members[1].send(map[string]any{"type": "set", "note": map[string]any{"text": longNote, "emoji": "🌴"}})
	for _, m := range members[2:5] {
		m.send(map[string]string{"type": "activity", "state": "away"})
	}

	// The page's own user: a 64-character ID, and a long name from its token.
	q := query("me-"+longUID[:61], longName)
	q.Del("channels")
	page := srv.URL + "/?" + q.Encode()
	do(t, tab, "open the page", chromedp.EmulateViewport(1280, 800), colorScheme("light"), chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	waitJS(t, tab, "the lobby listed", has(shown("lobby"))+` && document.getElementById('room-count').textContent === "201"`, e2eWait)
	if mode == "demo" {
		do(t, tab, "spawn", chromedp.SetValue(chromedp.CSS("#spawn-n"), "6"), chromedp.Click(chromedp.CSS("#spawn")))
		waitJS(t, tab, "6 live", `document.querySelectorAll('#sims .sim[data-state="live"]').length === 6`, e2eWait)
		do(t, tab, "silence one", chromedp.Click(chromedp.CSS(`#sims .sim:nth-child(2) button[data-act="silence"]`)),
			chromedp.Click(chromedp.CSS(`#sims .sim:nth-child(3) button[data-act="away"]`)))
	}
	for _, u := range []string{longUID, "carol", "never-seen-user"} {
		do(t, tab, "watch "+u, chromedp.SendKeys(chromedp.CSS("#watch-uid"), u), chromedp.Click(chromedp.CSS("#watch")))
	}
	waitJS(t, tab, "carol last seen", `(document.querySelector('#watched li[data-uid="carol"]')?.dataset.lastSeen ?? '') !== ''`, e2eWait)
	do(t, tab, "the own note", chromedp.SetValue(chromedp.CSS("#note-emoji"), "🎧"), chromedp.SetValue(chromedp.CSS("#note-text"), longNote),
		chromedp.Click(chromedp.CSS("#note-set")))
	waitJS(t, tab, "the own note shown", `document.querySelector('#my-status .note-view .text').textContent.length === 128`, e2eWait)
	members[0].send(map[string]string{"type": "chat", "channel": "lobby", "text": strings.Repeat("A long message without a space ", 3) + longUID})
	do(t, tab, "chat", chromedp.SendKeys(chromedp.CSS("#chat-text"), "hello, everyone: how does this look on a laptop?"),
		chromedp.Click(chromedp.CSS("#chat-send")))
	waitJS(t, tab, "two chats", `document.querySelectorAll('#chat li').length >= 2`, e2eWait)
	return members[5]
}

// layoutCheck lists the elements of the page that do not fit, each with
// why: the page wider than the viewport; an element outside the card (or
// header) it belongs to, unless a scrolling list holds it; content cut by
// overflow without an ellipsis and a title; an ID or a name on two lines;
// a list that holds rows squeezed below two of them.
const layoutCheck = `(() => {
  const bad = [];
  const label = (el) => {
    const parts = [];
    for (let e = el; e && e !== document.body; e = e.parentElement) {
      let s = e.tagName.toLowerCase();
      if (e.id) s += '#' + e.id;
      else if (typeof e.className === 'string' && e.className.trim()) s += '.' + e.className.trim().split(/\s+/).join('.');
      parts.unshift(s);
      if (e.id) break;
    }
    return parts.join(' > ') + ' "' + (el.textContent || '').trim().slice(0, 40) + '"';
  };
  const vw = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > vw + 1) bad.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + vw);
  const scrolls = (cs) => ['auto', 'scroll'].includes(cs.overflowY) || ['auto', 'scroll'].includes(cs.overflowX);
  const clips = (v) => v === 'hidden' || v === 'clip';
  for (const el of document.querySelectorAll('body *')) {
    if (!el.checkVisibility() || el.closest('.sr-only, datalist, noscript, script')) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    const cs = getComputedStyle(el);
    // Inside the box it belongs to.
    let box = el.parentElement;
    while (box && box !== document.body && !box.matches('.card, .top') && !scrolls(getComputedStyle(box))) box = box.parentElement;
    if (box && box !== document.body && !scrolls(getComputedStyle(box))) {
      const b = box.getBoundingClientRect();
      const out = [r.left < b.left - 1 && 'left', r.right > b.right + 1 && 'right', r.top < b.top - 1 && 'top', r.bottom > b.bottom + 1 && 'bottom'].filter(Boolean);
      if (out.length) bad.push(label(el) + ': out of its ' + (box.id || box.className) + ' at the ' + out.join(', ') +
        ' (' + Math.round(r.left) + ',' + Math.round(r.top) + ' ' + Math.round(r.width) + 'x' + Math.round(r.height) + ' in ' +
        Math.round(b.left) + ',' + Math.round(b.top) + ' ' + Math.round(b.width) + 'x' + Math.round(b.height) + ')');
    }
    if (r.right > vw + 1 || r.left < -1) bad.push(label(el) + ': outside the viewport');
    // Cut without saying so.
    if (!scrolls(cs)) {
      const cutX = clips(cs.overflowX) && el.scrollWidth > el.clientWidth + 1;
      const cutY = clips(cs.overflowY) && el.scrollHeight > el.clientHeight + 1;
      const said = cs.textOverflow === 'ellipsis' && el.closest('[title]');
      if (cutY || (cutX && !said)) bad.push(label(el) + ': content cut (' + el.scrollWidth + 'x' + el.scrollHeight + ' in ' + el.clientWidth + 'x' + el.clientHeight + ')' + (cutX && !said ? ' without an ellipsis and a title' : ''));
    }
    // IDs and names on one line.
    if (el.matches('.uid, .name, .sim .uid, .tab .name') && el.getClientRects().length > 1) bad.push(label(el) + ': broken over ' + el.getClientRects().length + ' lines');
    // A list that holds rows shows two of them at least.
    if (scrolls(cs) && el.matches('.list, .chat, .log') && el.children.length > 1) {
      const row = el.firstElementChild.getBoundingClientRect().height;
      if (el.clientHeight < Math.min(2 * row, el.scrollHeight) - 1) bad.push(label(el) + ': ' + el.clientHeight + 'px high, less than two rows');
    }
  }
  return bad;
})()`
