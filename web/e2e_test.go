package web_test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestE2E drives the page in a real Chromium against a real presenced on a
// short ring: the page connects and joins the lobby, lists its members from
// the snapshot and follows the diffs as other users join and leave; chat
// reaches the members of a room and no one else; a second room can be joined,
// used and left; a watched user shows online, then offline; a silenced
// simulated client is dropped with 4408 within timeout+tick; a restarted
// server is reconnected to with everything joined and watched again; and the
// console stays clean.
func TestE2E(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	b := startBrowser(t, chromium)
	a := b.ctx

	// The page works with no parameters: it picks a guest ID, connects and
	// joins the lobby.
	do(t, a, "open the page", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	uid := eval[string](t, a, `document.getElementById('me-uid').textContent`)
	require.Regexp(t, `^guest-[0-9a-z]{4}$`, uid)
	assert.Equal(t, "demo", eval[string](t, a, `document.body.dataset.mode`), "the page knows the server runs in demo mode")
	assert.True(t, eval[bool](t, a, `document.getElementById('spawn').checkVisibility()`), "Spawn offered in demo mode")
	assert.True(t, eval[bool](t, a, `document.getElementById('notice').hidden`), "no notice in demo mode")
	var list struct {
		Count int      `json:"count"`
		Users []string `json:"users"`
	}
	srv.getJSON(t, "/api/presence", &list)
	assert.Contains(t, list.Users, uid, "the page's user is online at the server")
	var me presenceOne
	srv.getJSON(t, "/api/presence/"+uid, &me)
	assert.Equal(t, presenceOne{UID: uid, Online: true, Connections: 1}, me)
	waitJS(t, a, "the lobby joined", has(shown("lobby")), e2eWait)
	waitJS(t, a, "own user listed in the lobby", has(member(uid)), e2eWait)
	var lobby struct {
		Channel string   `json:"channel"`
		Count   int      `json:"count"`
		Members []string `json:"members"`
	}
	srv.getJSON(t, "/api/channels/lobby", &lobby)
	assert.Equal(t, "lobby", lobby.Channel)
	assert.Contains(t, lobby.Members, uid, "the page is a member of the lobby at the server")
	assert.Equal(t, strconv.Itoa(lobby.Count), eval[string](t, a, text("#room-count")), "the page shows the lobby's count")
	assert.Contains(t, eval[string](t, a, `document.querySelector('#log li[data-kind="joined"]')?.textContent ?? ''`), "joined lobby")

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

	t.Run("a member joins, chats and leaves the lobby", func(t *testing.T) {
		carol := dialWS(t, srv, "e2e-carol", "lobby")
		j := carol.next("joined")
		assert.Equal(t, "lobby", j.Channel, "%s", j)
		assert.Contains(t, j.Members, uid, "the snapshot lists the page's user: %s", j)
		assert.True(t, slices.IsSorted(j.Members), "members sorted: %s", j)
		assert.Equal(t, len(j.Members), j.Count, "a small channel lists every member: %s", j)

		// The page learns of carol from a diff.
		waitJS(t, a, "carol listed", has(member("e2e-carol")), e2eWait)
		waitJS(t, a, "carol's join logged", has(logged("join", "e2e-carol")), e2eWait)
		assert.Contains(t, eval[string](t, a, text(logged("join", "e2e-carol"))), "joined lobby")
		assert.Equal(t, strconv.Itoa(j.Count), eval[string](t, a, text("#room-count")))

		// Chat from a Go client reaches the page; the page's reaches carol.
		carol.send(map[string]string{"type": "chat", "channel": "lobby", "text": "hello from Go <i>plain</i>"})
		sel := `#chat li[data-channel="lobby"][data-from="e2e-carol"] p`
		waitJS(t, a, "carol's message on the page", has(sel), e2eWait)
		assert.Equal(t, "hello from Go <i>plain</i>", eval[string](t, a, text(sel)))
		assert.Zero(t, eval[int](t, a, `document.querySelectorAll('#chat i').length`), "chat text is shown as text, not HTML")
		do(t, a, "reply", chromedp.SendKeys(chromedp.CSS("#chat-text"), "hi carol"), chromedp.Click(chromedp.CSS("#chat-send")))
		own := carol.next("chat")
		if own.From == "e2e-carol" { // the sender gets its own message too
			own = carol.next("chat")
		}
		assert.Equal(t, wsFrame{Type: "chat", Channel: "lobby", From: uid, Text: "hi carol"}, wsFrame{Type: own.Type, Channel: own.Channel, From: own.From, Text: own.Text}, "%s", own)
		assert.Empty(t, eval[string](t, a, `document.getElementById('chat-text').value`), "the box is cleared after sending")

		// Carol leaves the lobby but stays connected: a diff takes her off the list.
		carol.send(map[string]string{"type": "leave", "channel": "lobby"})
		assert.Equal(t, "lobby", carol.next("left").Channel)
		waitJS(t, a, "carol gone from the list", hasNo(member("e2e-carol")), e2eWait)
		waitJS(t, a, "carol's leave logged", has(logged("leave", "e2e-carol")), e2eWait)
		assert.True(t, srv.online(t, "e2e-carol"), "carol left the lobby, not the server")
	})

	t.Run("silenced client drops with 4408", func(t *testing.T) {
		do(t, a, "spawn 3", chromedp.SetValue(chromedp.CSS("#spawn-n"), "3"), chromedp.Click(chromedp.CSS("#spawn")))
		waitJS(t, a, "3 live simulated clients", `document.querySelectorAll('#sims .sim[data-state="live"]').length === 3`, e2eWait)
		sims := eval[[]string](t, a, `[...document.querySelectorAll('#sims .sim')].map(li => li.dataset.uid)`)
		require.Len(t, sims, 3)
		for _, s := range sims {
			assert.True(t, srv.online(t, s), "%s online at the server", s)
			waitJS(t, a, s+" in the lobby", has(member(s)), e2eWait)
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
		}, e2eTimeout+e2eTick+e2eWait, 10*time.Millisecond, "%s never went offline", victim)
		t.Logf("silenced %s went offline after %v, %d steps (timeout %v, tick %v)", victim, gone, steps, e2eTimeout, e2eTick)
		// Offline comes from the ring, not from the page: the silence frame
		// itself (sent after the first cursor read) is the last keepalive, and
		// a key is reported by the Slots-th step after its touch.
		assert.GreaterOrEqual(t, steps, e2eSlots-1, "dropped too early")

		// The others kept sending keepalives and outlived a whole timeout.
		for _, s := range others {
			assert.True(t, srv.online(t, s), "%s, not silenced, is still online", s)
		}

		// What the page shows: idle first, then the close and the lobby's leave.
		waitJS(t, a, "the leave in the log", has(logged("leave", victim)), e2eWait)
		waitJS(t, a, "the close in the log", has(logged("closed", victim)), e2eWait)
		assert.Contains(t, eval[string](t, a, text(logged("closed", victim))), "4408 idle timeout")
		order := eval[[]string](t, a, `[...document.querySelectorAll('#log li[data-uid=`+q(victim)+`]')].reverse().map(li => li.dataset.kind)`)
		require.GreaterOrEqual(t, len(order), 5, "log of %s, oldest first: %v", victim, order)
		assert.Equal(t, []string{"join", "silenced", "idle"}, order[:3], "log of %s, oldest first", victim)
		assert.ElementsMatch(t, []string{"closed", "leave"}, order[3:5], "log of %s, oldest first: %v", victim, order)
		waitJS(t, a, "the row closed", `document.querySelector(`+q(row)+`).dataset.state === "closed"`, e2eWait)
		assert.Contains(t, eval[string](t, a, text(row+` .status`)), "4408 idle timeout")
		waitJS(t, a, "gone from the lobby", hasNo(member(victim)), e2eWait)

		// Bring back reconnects it, into the lobby.
		do(t, a, "bring back "+victim, chromedp.Click(chromedp.CSS(row+` button[data-act="back"]`)))
		waitJS(t, a, victim+" live again", `document.querySelector(`+q(row)+`).dataset.state === "live"`, e2eWait)
		assert.True(t, srv.online(t, victim), "%s online again", victim)
		waitJS(t, a, victim+" back in the lobby", has(member(victim)), e2eWait)
	})

	t.Run("a second room", func(t *testing.T) {
		bob := b.tab("page 2")
		do(t, bob, "open a second page", chromedp.EmulateViewport(800, 700), chromedp.Navigate(srv.URL+"/?uid=e2e-bob"),
			chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
		assert.Equal(t, "e2e-bob", eval[string](t, bob, `document.getElementById('me-uid').textContent`), "?uid= is honoured")
		waitJS(t, a, "bob listed on page 1", has(member("e2e-bob")), e2eWait)
		waitJS(t, bob, "page 1 listed on page 2", has(member(uid)), e2eWait)
		// erin stays in the lobby only: what is said in the room must not reach her.
		erin := dialWS(t, srv, "e2e-erin", "lobby")
		erin.next("joined")

		// Page 1 joins a room; the form rejects a name the server would refuse.
		do(t, a, "join a bad name", chromedp.SendKeys(chromedp.CSS("#join-name"), "no spaces"), chromedp.Click(chromedp.CSS("#join")))
		waitJS(t, a, "the bad name refused", `[...document.querySelectorAll('#log li[data-kind="error"]')].some(li => li.textContent.includes('"no spaces" is not a room name'))`, e2eWait)
		assert.Equal(t, "no spaces", eval[string](t, a, `document.getElementById('join-name').value`), "kept to be fixed")
		eval[string](t, a, `document.getElementById('join-name').value = ''`)
		assert.Equal(t, 1, eval[int](t, a, `document.querySelectorAll('#room-tabs button').length`), "no tab for a refused name")

		const room = "e2e:room/1"
		do(t, a, "join "+room, chromedp.SendKeys(chromedp.CSS("#join-name"), room), chromedp.Click(chromedp.CSS("#join")))
		waitJS(t, a, "the room joined and shown", has(shown(room)), e2eWait)
		assert.Equal(t, "1", eval[string](t, a, text("#room-count")), "alone in the new room")
		assert.Equal(t, []string{uid}, eval[[]string](t, a, `[...document.querySelectorAll('#members li[data-uid]')].map(li => li.dataset.uid)`))
		assert.Equal(t, room, eval[string](t, a, text("#chat-room")), "the chat is the room's")

		do(t, bob, "bob joins "+room, chromedp.SendKeys(chromedp.CSS("#join-name"), room), chromedp.Click(chromedp.CSS("#join")))
		waitJS(t, bob, "the room joined on page 2", has(shown(room)), e2eWait)
		waitJS(t, a, "bob in the room on page 1", has(member("e2e-bob")), e2eWait)
		assert.Equal(t, "2", eval[string](t, a, text("#room-count")))

		do(t, a, "chat in the room", chromedp.SendKeys(chromedp.CSS("#chat-text"), "only for the room"), chromedp.Click(chromedp.CSS("#chat-send")))
		inRoom := `#chat li[data-channel=` + q(room) + `][data-from=` + q(uid) + `] p`
		waitJS(t, bob, "the room's message on page 2", has(inRoom), e2eWait)
		assert.Equal(t, "only for the room", eval[string](t, bob, text(inRoom)))
		do(t, bob, "bob answers in the room", chromedp.SendKeys(chromedp.CSS("#chat-text"), "room reply"), chromedp.Click(chromedp.CSS("#chat-send")))
		waitJS(t, a, "bob's answer on page 1", has(`#chat li[data-channel=`+q(room)+`][data-from="e2e-bob"]`), e2eWait)

		// Back in the lobby tab: the lobby's chat, and what is said there
		// is the first chat erin gets (frames on one connection keep their order).
		do(t, a, "show the lobby", chromedp.Click(chromedp.CSS(roomTab("lobby"))))
		waitJS(t, a, "the lobby shown", has(shown("lobby")), e2eWait)
		assert.False(t, eval[bool](t, a, `[...document.querySelectorAll('#chat li')].some(li => !li.hidden && li.dataset.channel !== 'lobby')`),
			"only the lobby's messages are shown")
		do(t, a, "chat in the lobby", chromedp.SendKeys(chromedp.CSS("#chat-text"), "lobby again"), chromedp.Click(chromedp.CSS("#chat-send")))
		got := erin.next("chat")
		assert.Equal(t, "lobby", got.Channel, "erin gets the lobby's chat and not the room's: %s", got)
		assert.Equal(t, "lobby again", got.Text, "%s", got)

		// A message in the room while the lobby is shown: an unread mark on its tab.
		do(t, bob, "bob again", chromedp.SendKeys(chromedp.CSS("#chat-text"), "are you there?"), chromedp.Click(chromedp.CSS("#chat-send")))
		waitJS(t, a, "unread mark", `document.querySelector(`+q(roomTab(room)+` .unread`)+`)?.textContent === "1"`, e2eWait)

		// Leave the room: its tab goes; page 2 sees page 1 go.
		do(t, a, "show the room", chromedp.Click(chromedp.CSS(roomTab(room))))
		waitJS(t, a, "the room shown", has(shown(room)), e2eWait)
		assert.Empty(t, eval[string](t, a, text(roomTab(room)+` .unread`)), "read once shown")
		do(t, a, "leave the room", chromedp.Click(chromedp.CSS("#room-leave")))
		waitJS(t, a, "the room's tab gone", hasNo(roomTab(room)), e2eWait)
		waitJS(t, a, "the lobby shown again", has(shown("lobby")), e2eWait)
		assert.Equal(t, []string{"hello from Go <i>plain</i>", "hi carol", "lobby again"},
			eval[[]string](t, a, `[...document.querySelectorAll('#chat li:not([hidden]) p')].map(p => p.textContent)`), "the lobby's chat shown again")
		waitJS(t, a, "left logged", `[...document.querySelectorAll('#log li[data-kind="left"]')].some(li => li.textContent.includes(`+q("left "+room)+`))`, e2eWait)
		waitJS(t, bob, "page 1 gone from the room on page 2", hasNo(member(uid)), e2eWait)
		assert.Equal(t, "1", eval[string](t, bob, text("#room-count")))
		assert.True(t, eval[bool](t, a, has(member("e2e-bob"))), "bob still in the lobby")
	})

	t.Run("watch a user", func(t *testing.T) {
		const dave = "e2e-dave"
		row := `#watched li[data-uid=` + q(dave) + `]`
		do(t, a, "watch dave", chromedp.SendKeys(chromedp.CSS("#watch-uid"), dave), chromedp.Click(chromedp.CSS("#watch")))
		waitJS(t, a, "dave offline", has(row+`[data-online="offline"]`), e2eWait)
		assert.Contains(t, eval[string](t, a, `document.querySelector('#log li[data-kind="watch"]')?.textContent ?? ''`), "watching 1 user, 0 online")

		d := dialWS(t, srv, dave) // in no room: the watch alone tells the page
		waitJS(t, a, "dave online", has(row+`[data-online="online"]`), e2eWait)
		waitJS(t, a, "dave's online logged", has(logged("online", dave)), e2eWait)
		assert.False(t, eval[bool](t, a, has(member(dave))), "dave joined no room")

		d.close()
		waitJS(t, a, "dave offline again", has(row+`[data-online="offline"]`), e2eWait)
		waitJS(t, a, "dave's offline logged", has(logged("offline", dave)), e2eWait)
	})

	t.Run("publish and send from the server side", func(t *testing.T) {
		post := func(path, body string) {
			t.Helper()
			res, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
			require.NoError(t, err, "POST %s", path)
			res.Body.Close()
			if res.StatusCode == http.StatusNotFound {
				// The protocol has these endpoints; a server without them
				// yet cannot show what the page does with their frames.
				t.Skipf("the server has no POST %s (404)", path)
			}
			require.Equal(t, http.StatusNoContent, res.StatusCode, "POST %s %s", path, body)
		}
		post("/api/publish", `{"channel":"lobby","data":{"note":"<b>from the server</b>"}}`)
		sel := `#chat li.system[data-channel="lobby"] p`
		waitJS(t, a, "the published message in the lobby's chat", has(sel), e2eWait)
		assert.JSONEq(t, `{"note":"<b>from the server</b>"}`, eval[string](t, a, text(sel)))
		waitJS(t, a, "the publish logged", has(`#log li[data-kind="publish"]`), e2eWait)
		assert.Zero(t, eval[int](t, a, `document.querySelectorAll('#chat b, #log b').length`), "published data is shown as text")

		post("/api/send", `{"uid":`+q(uid)+`,"data":{"to":"you"}}`)
		waitJS(t, a, "the message logged", has(`#log li[data-kind="message"]`), e2eWait)
		assert.Contains(t, eval[string](t, a, text(`#log li[data-kind="message"]`)), `{"to":"you"}`)
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
		// The first reconnect waits only 0.25 to 0.5 s, then fails with a
		// 1006 and schedules the second: the close shown, the state and the
		// try's number are asked at once, by one check in the page, or a
		// busy machine would look after they changed.
		waitJS(t, a, "the 1001 shown and try 1 scheduled", `document.getElementById('me').dataset.state === "waiting" && `+
			`document.getElementById('me-close').textContent.startsWith("1001") && `+
			`/^reconnect try 1 in /.test(document.getElementById('me-state').textContent)`, e2eWait)
		assert.True(t, eval[bool](t, a, `[...document.querySelectorAll('#log li[data-kind="conn"]')].some(li => `+
			`li.textContent.includes("connection closed: 1001") && li.textContent.includes("reconnecting with backoff"))`),
			"the 1001 logged as retried with backoff")
		// Let it fail at least once against the closed port before the server returns.
		waitJS(t, a, "a failed try", `/^reconnect try [2-9] in /.test(document.getElementById('me-state').textContent)`, e2eWait)
		srv.Restart()
		waitJS(t, a, "reconnected", `document.getElementById('me').dataset.state === "live"`, e2eWait)
		assert.True(t, srv.online(t, uid), "%s online at the restarted server", uid)
		// A refused attempt is a 1006 without a close frame.
		assert.True(t, eval[bool](t, a, `[...document.querySelectorAll('#log li[data-kind="conn"]')].some(li => li.textContent.includes("1006"))`))
		// The new connection is in the lobby again and watches dave again.
		waitJS(t, a, "the lobby joined again", has(shown("lobby")), e2eWait)
		waitJS(t, a, "listed in the lobby again", has(member(uid)), e2eWait)
		waitJS(t, a, "dave watched again", has(`#watched li[data-uid="e2e-dave"][data-online="offline"]`), e2eWait)
	})

	t.Run("disconnect and connect by hand", func(t *testing.T) {
		do(t, a, "disconnect", chromedp.Click(chromedp.CSS("#me-toggle")))
		waitJS(t, a, "closed", `document.getElementById('me').dataset.state === "closed"`, e2eWait)
		require.Eventually(t, func() bool { return !srv.online(t, uid) }, e2eWait, 10*time.Millisecond, "offline after Disconnect")
		assert.Equal(t, "Connect", eval[string](t, a, `document.getElementById('me-toggle').textContent`))
		assert.True(t, strings.HasPrefix(eval[string](t, a, `document.getElementById('me-close').textContent`), "1000"), "a normal close")
		do(t, a, "connect", chromedp.Click(chromedp.CSS("#me-toggle")))
		waitJS(t, a, "live", `document.getElementById('me').dataset.state === "live"`, e2eWait)
		assert.True(t, srv.online(t, uid), "online after Connect")
		waitJS(t, a, "in the lobby again", has(member(uid)), e2eWait)
	})

	assert.Empty(t, b.errors(), "console errors or exceptions")
}
