package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the page shows of protocol v2.1, in a real Chromium against a real
// presenced on the short e2e ring: away members, last seen, a big room
// paged, who is typing.

// presenceState is GET /api/presence/{uid} with the v2.1 fields.
type presenceState struct {
	Online   bool   `json:"online"`
	State    string `json:"state"`
	LastSeen int64  `json:"last_seen"`
}

func (s *server) presence(t *testing.T, uid string) presenceState {
	t.Helper()
	var p presenceState
	s.getJSON(t, "/api/presence/"+uid, &p)
	return p
}

// waitState waits until the server says uid is in state (active, away or offline).
func (s *server) waitState(t *testing.T, uid, state string) {
	t.Helper()
	require.Eventually(t, func() bool { return s.presence(t, uid).State == state }, e2eWait, 10*time.Millisecond,
		"%s never %s at the server", uid, state)
}

// openPage opens the page as uid on tab and waits until it is live and in the lobby.
func openPage(t *testing.T, tab context.Context, srv *server, uid string) {
	t.Helper()
	do(t, tab, "open the page as "+uid, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(srv.URL+"/?uid="+uid),
		chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	waitJS(t, tab, uid+" in the lobby", has(shown("lobby")), e2eWait)
}

func awayMember(uid string) string   { return member(uid) + `.away` }
func activeMember(uid string) string { return member(uid) + `:not(.away)` }
func watchedRow(uid string) string   { return `#watched li[data-uid=` + q(uid) + `]` }

// TestDemoShowsAway checks the away control of the page's connection and of
// a simulated client: the user turns away at the server, and another page
// draws it dimmed in the member list (from a diff and from a snapshot) and
// says "away" of it when watched; back, it is drawn as before.
func TestDemoShowsAway(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	b := startBrowser(t, chromium)
	ann, ben := b.ctx, b.tab("ben")
	openPage(t, ann, srv, "e2e-ann")
	openPage(t, ben, srv, "e2e-ben")
	waitJS(t, ann, "ben listed, active", has(activeMember("e2e-ben")), e2eWait)
	do(t, ann, "watch ben", chromedp.SendKeys(chromedp.CSS("#watch-uid"), "e2e-ben"), chromedp.Click(chromedp.CSS("#watch")))
	waitJS(t, ann, "ben watched, online", has(watchedRow("e2e-ben")+`[data-online="online"][data-away="false"]`), e2eWait)

	do(t, ben, "ben goes away", chromedp.Click(chromedp.CSS("#me-away")))
	srv.waitState(t, "e2e-ben", "away")
	assert.Equal(t, "I'm back", eval[string](t, ben, text("#me-away")))
	assert.Contains(t, eval[string](t, ben, text("#me-activity")), "away")
	waitJS(t, ann, "ben dimmed", has(awayMember("e2e-ben")), e2eWait)
	assert.Less(t, eval[float64](t, ann, `+getComputedStyle(document.querySelector(`+q(member("e2e-ben")+" .uid")+`)).opacity`), 0.9, "drawn dimmed")
	assert.Contains(t, eval[string](t, ann, text(member("e2e-ben")+" .tag")), "away")
	waitJS(t, ann, "ben watched, away", has(watchedRow("e2e-ben")+`[data-away="true"]`), e2eWait)
	assert.Equal(t, "away", eval[string](t, ann, text(watchedRow("e2e-ben")+" .seen")))
	waitJS(t, ann, "ben's away logged", has(logged("away", "e2e-ben")), e2eWait)

	do(t, ben, "ben is back", chromedp.Click(chromedp.CSS("#me-away")))
	srv.waitState(t, "e2e-ben", "active")
	waitJS(t, ann, "ben no longer dimmed", has(activeMember("e2e-ben")), e2eWait)
	assert.Equal(t, 1.0, eval[float64](t, ann, `+getComputedStyle(document.querySelector(`+q(member("e2e-ben")+" .uid")+`)).opacity`))
	waitJS(t, ann, "ben watched, active", has(watchedRow("e2e-ben")+`[data-away="false"]`), e2eWait)
	assert.Regexp(t, `^online for `, eval[string](t, ann, text(watchedRow("e2e-ben")+" .seen")))

	// A simulated client of ann's page has the same control.
	do(t, ann, "spawn 1", chromedp.SetValue(chromedp.CSS("#spawn-n"), "1"), chromedp.Click(chromedp.CSS("#spawn")))
	waitJS(t, ann, "a live simulated client", has(`#sims .sim[data-state="live"]`), e2eWait)
	sim := eval[string](t, ann, `document.querySelector('#sims .sim').dataset.uid`)
	row := `#sims .sim[data-uid=` + q(sim) + `]`
	waitJS(t, ben, "the simulated client listed on ben's page", has(activeMember(sim)), e2eWait)
	do(t, ann, "the simulated client goes away", chromedp.Click(chromedp.CSS(row+` button[data-act="away"]`)))
	srv.waitState(t, sim, "away")
	waitJS(t, ben, "the simulated client dimmed", has(awayMember(sim)), e2eWait)
	assert.Equal(t, "Back", eval[string](t, ann, text(row+` button[data-act="away"]`)))

	// A new connection learns who is away from its snapshot.
	do(t, ben, "reload ben's page", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	waitJS(t, ben, "dimmed from the snapshot", has(shown("lobby"))+` && `+has(awayMember(sim)), e2eWait)
	assert.True(t, eval[bool](t, ben, has(activeMember("e2e-ann"))), "ann is not away")

	do(t, ann, "the simulated client is back", chromedp.Click(chromedp.CSS(row+` button[data-act="away"]`)))
	srv.waitState(t, sim, "active")
	waitJS(t, ben, "the simulated client no longer dimmed", has(activeMember(sim)), e2eWait)
	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestDemoShowsLastSeen checks the last seen of watched users: one who went
// offline before the watch (the page asks GET /api/presence/{uid}) and one
// who goes offline while watched (the status frame says when).
func TestDemoShowsLastSeen(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	gone := dialWS(t, srv, "e2e-gone")
	gone.close()
	require.Eventually(t, func() bool { return !srv.online(t, "e2e-gone") }, e2eWait, 10*time.Millisecond, "e2e-gone offline")
	goneAt := srv.presence(t, "e2e-gone").LastSeen
	require.NotZero(t, goneAt, "the server keeps e2e-gone's last seen")

	b := startBrowser(t, chromium)
	a := b.ctx
	openPage(t, a, srv, "e2e-eve")
	lastSeen := func(uid string) string {
		return `(document.querySelector(` + q(watchedRow(uid)) + `)?.dataset.lastSeen ?? '')`
	}

	do(t, a, "watch e2e-gone", chromedp.SendKeys(chromedp.CSS("#watch-uid"), "e2e-gone"), chromedp.Click(chromedp.CSS("#watch")))
	waitJS(t, a, "e2e-gone's last seen", lastSeen("e2e-gone")+` !== ''`, e2eWait)
	assert.Equal(t, strconv.FormatInt(goneAt, 10), eval[string](t, a, lastSeen("e2e-gone")), "the server's last seen")
	assert.Equal(t, "offline", eval[string](t, a, `document.querySelector(`+q(watchedRow("e2e-gone"))+`).dataset.online`))
	assert.Regexp(t, `^last seen (just now|\d+ min ago)$`, eval[string](t, a, text(watchedRow("e2e-gone")+" .seen")))

	do(t, a, "watch e2e-dan", chromedp.SendKeys(chromedp.CSS("#watch-uid"), "e2e-dan"), chromedp.Click(chromedp.CSS("#watch")))
	waitJS(t, a, "e2e-dan offline", has(watchedRow("e2e-dan")+`[data-online="offline"]`), e2eWait)
	dan := dialWS(t, srv, "e2e-dan")
	waitJS(t, a, "e2e-dan online", has(watchedRow("e2e-dan")+`[data-online="online"]`), e2eWait)
	assert.Empty(t, eval[string](t, a, lastSeen("e2e-dan")), "no last seen while online")
	dan.close()
	waitJS(t, a, "e2e-dan offline, seen", has(watchedRow("e2e-dan")+`[data-online="offline"]`)+` && `+lastSeen("e2e-dan")+` !== ''`, e2eWait)
	danAt := srv.presence(t, "e2e-dan").LastSeen
	assert.Equal(t, strconv.FormatInt(danAt, 10), eval[string](t, a, lastSeen("e2e-dan")), "the status frame's last seen")
	assert.Regexp(t, `^last seen (just now|\d+ min ago)$`, eval[string](t, a, text(watchedRow("e2e-dan")+" .seen")))
	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestDemoPagesLargeRoom fills the lobby past the snapshot's 10 names and
// pages the rest with "load more" while members join and leave on both
// sides of the page boundary: the page ends with exactly the server's
// members, and knows who is away from the pages.
func TestDemoPagesLargeRoom(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String(), "-member-list", "10")
	fill := map[string]*wsClient{}
	for i := range 30 {
		u := fmt.Sprintf("fill-%02d", i)
		fill[u] = dialWS(t, srv, u, "lobby")
	}
	fill["fill-27"].send(map[string]string{"type": "activity", "state": "away"})
	srv.waitState(t, "fill-27", "away")

	b := startBrowser(t, chromium)
	a := b.ctx
	openPage(t, a, srv, "page-1")
	listed := func() []string {
		return eval[[]string](t, a, `[...document.querySelectorAll('#members li[data-uid]')].map(li => li.dataset.uid)`)
	}
	assert.Equal(t, "31", eval[string](t, a, text("#room-count")))
	assert.Equal(t, "members, showing 10", eval[string](t, a, text("#room-note")))
	assert.Len(t, listed(), 10)
	assert.True(t, eval[bool](t, a, `document.getElementById('room-more').checkVisibility()`), "load more offered")
	assert.Equal(t, "load more", eval[string](t, a, text("#room-more")))

	// Diffs before the first page: a join inside the listed names is shown,
	// one past them waits for its page; a listed member and an unlisted one leave.
	dialWS(t, srv, "fill-04x", "lobby")
	dialWS(t, srv, "fill-99", "lobby")
	fill["fill-02"].close()
	fill["fill-15"].close()
	waitJS(t, a, "the diffs applied", `document.getElementById('room-count').textContent === "31"`+
		` && `+has(member("fill-04x"))+` && `+hasNo(member("fill-02")), e2eWait)
	assert.NotContains(t, listed(), "fill-99", "past the listed names: left for its page")

	clicks := 0
	for eval[bool](t, a, `document.getElementById('room-more').checkVisibility()`) {
		require.Less(t, clicks, 10, "still paging after %d pages", clicks)
		before := len(listed())
		do(t, a, "load more", chromedp.Click(chromedp.CSS("#room-more")))
		clicks++
		waitJS(t, a, "the page shown", `document.getElementById('room-more').textContent !== "loading…"`, e2eWait)
		assert.Greater(t, len(listed()), before, "page %d added members", clicks)
		if clicks == 1 {
			// Between pages, one more joins past everything.
			dialWS(t, srv, "fill-zz", "lobby")
			waitJS(t, a, "fill-zz counted", `document.getElementById('room-count').textContent === "32"`, e2eWait)
		}
	}
	assert.GreaterOrEqual(t, clicks, 3, "pages of 10 for 32 members")

	var lobby struct {
		Count   int      `json:"count"`
		Members []string `json:"members"`
	}
	srv.getJSON(t, "/api/channels/lobby?limit=1000", &lobby)
	got := listed()
	slices.Sort(got)
	assert.Equal(t, lobby.Members, got, "the page lists exactly the server's members")
	assert.Equal(t, strconv.Itoa(lobby.Count), eval[string](t, a, text("#room-count")))
	assert.Equal(t, "members", eval[string](t, a, text("#room-note")))
	assert.Equal(t, "false", eval[string](t, a, `document.getElementById('rooms-card').dataset.partial`))
	assert.False(t, eval[bool](t, a, has("#members li.more")), "nothing left unlisted")
	assert.True(t, eval[bool](t, a, has(awayMember("fill-27"))), "away, from its page")
	assert.Equal(t, 1, eval[int](t, a, `document.querySelectorAll('#members li.away').length`))

	// Complete, the list follows every diff.
	fill["fill-28"].close()
	dialWS(t, srv, "fill-zzz", "lobby")
	waitJS(t, a, "the diff applied", hasNo(member("fill-28"))+` && `+has(member("fill-zzz")), e2eWait)
	assert.Equal(t, "members", eval[string](t, a, text("#room-note")))
	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestDemoShowsTyping types into the page's chat box, which tells the
// room's members, and shows who else types from the server's typing frames,
// from diffs and after a snapshot. It needs a server that relays typing; a
// long typing TTL keeps the marks up however slow a step is.
func TestDemoShowsTyping(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String(), "-typing-ttl", "1m")
	others := []string{"e2e-al", "e2e-bo", "e2e-cy", "e2e-di"}
	c := map[string]*wsClient{}
	for _, u := range others {
		c[u] = dialWS(t, srv, u, "lobby")
	}
	b := startBrowser(t, chromium)
	a := b.ctx
	openPage(t, a, srv, "e2e-tia")
	for _, u := range others {
		waitJS(t, a, u+" listed", has(member(u)), e2eWait)
	}

	// Typing in the box tells the others; the page does not show its own.
	do(t, a, "type", chromedp.SendKeys(chromedp.CSS("#chat-text"), "hel"))
	for {
		f := c["e2e-al"].next("typing")
		var users struct {
			Channel string   `json:"channel"`
			Users   []string `json:"users"`
		}
		require.NoError(t, json.Unmarshal([]byte(f.raw), &users), f.raw)
		if slices.Contains(users.Users, "e2e-tia") {
			assert.Equal(t, "lobby", users.Channel)
			break
		}
	}
	assert.Empty(t, eval[string](t, a, text("#typing")), "the page does not tell its user that they type")

	typing := func(users ...string) {
		for _, u := range users {
			c[u].send(map[string]string{"type": "typing", "channel": "lobby"})
		}
	}
	typing("e2e-al")
	waitJS(t, a, "one typing", `(`+text("#typing")+`) === "e2e-al is typing…"`, e2eWait)
	typing("e2e-bo")
	waitJS(t, a, "two typing", `(`+text("#typing")+`) === "e2e-al and e2e-bo are typing…"`, e2eWait)
	typing("e2e-cy")
	waitJS(t, a, "three typing", `(`+text("#typing")+`) === "e2e-al, e2e-bo and e2e-cy are typing…"`, e2eWait)
	typing("e2e-di")
	waitJS(t, a, "four typing", `(`+text("#typing")+`) === "several people are typing…"`, e2eWait)

	// A new connection hears who types right after its snapshot.
	do(t, a, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#me[data-state="live"]`)))
	waitJS(t, a, "four typing after the snapshot", has(shown("lobby"))+` && (`+text("#typing")+`) === "several people are typing…"`, e2eWait)

	// Chatting ends typing.
	for _, u := range others {
		c[u].send(map[string]string{"type": "chat", "channel": "lobby", "text": "done"})
	}
	waitJS(t, a, "no one typing", `(`+text("#typing")+`) === ""`, e2eWait)
	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// TestE2EPageClientReconnects checks that the page's connection is the
// JavaScript client, and that after a server restart its lobby is rebuilt
// from the new snapshot: a member who left while the page was away is gone.
func TestE2EPageClientReconnects(t *testing.T) {
	chromium := needChromium(t)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String())
	b := startBrowser(t, chromium)
	a := b.ctx
	openPage(t, a, srv, "e2e-rc")
	assert.Equal(t, "Presenced", eval[string](t, a, `presenced.constructor.name`))
	x := dialWS(t, srv, "e2e-x", "lobby")
	waitJS(t, a, "x in the client's lobby", `presenced.channel('lobby').members.has('e2e-x')`, e2eWait)
	waitJS(t, a, "x listed", has(member("e2e-x")), e2eWait)

	from := time.Now()
	srv.Stop()
	x.close() // gone while the page is away
	waitJS(t, a, "the client waiting", `presenced.state === 'waiting'`, e2eWait)
	srv.Restart()
	waitJS(t, a, "live again, the lobby rebuilt without x",
		`presenced.state === 'live' && presenced.channel('lobby').complete && presenced.channel('lobby').members.has('e2e-rc')`+
			` && !presenced.channel('lobby').members.has('e2e-x')`, e2eWait)
	b.outage(from, time.Now())
	waitJS(t, a, "x no longer listed", hasNo(member("e2e-x")), e2eWait)
	assert.Equal(t, "1", eval[string](t, a, text("#room-count")))
	assert.Empty(t, b.errors(), "console errors or exceptions")
}
