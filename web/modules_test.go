package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/web"
)

// TestModulesInBrowser runs the page's pure modules in Chromium, served by
// web.Handler alone (no presenced): formatting, user ID and channel name
// rules, the reconnect backoff, the room and watch list models fed with
// server frames, and the ring drawing, including the cursor passing slot 0.
func TestModulesInBrowser(t *testing.T) {
	b, srv, run := moduleBrowser(t)

	t.Run("fmtDur", func(t *testing.T) {
		cases := map[float64]string{
			0: "0 ms", 100: "100 ms", 994: "990 ms", 1000: "1.0 s", 2000: "2.0 s", 2100: "2.1 s",
			9949: "9.9 s", 15000: "15 s", 30000: "30 s", 59400: "59 s", 60000: "1 min", 65000: "1 min 5 s", -5: "0 ms",
		}
		for in, want := range cases {
			var got string
			run(t, `import('/format.js').then(m => m.fmtDur(`+jsNum(in)+`))`, &got)
			assert.Equal(t, want, got, "fmtDur(%v)", in)
		}
	})

	t.Run("validUid", func(t *testing.T) {
		cases := map[string]bool{
			"alice": true, "a": true, "bob_1.x-y@host": true, "guest-0a9z": true,
			"": false, "with space": false, "é": false, "a/b": false, "<b>": false,
		}
		long := ""
		for range 64 {
			long += "x"
		}
		cases[long] = true
		cases[long+"x"] = false
		for in, want := range cases {
			var got bool
			run(t, `import('/format.js').then(m => m.validUid(`+q(in)+`))`, &got)
			assert.Equal(t, want, got, "validUid(%q)", in)
		}
		var tags []string
		run(t, `import('/format.js').then(m => Array.from({length: 50}, () => m.randomTag()))`, &tags)
		for _, tag := range tags {
			assert.Regexp(t, `^[0-9a-z]{4}$`, tag)
		}
	})

	t.Run("validChannel", func(t *testing.T) {
		cases := map[string]bool{
			"lobby": true, "a": true, "team:42/general#ops": true, "x_y.z-w@host": true,
			"": false, "with space": false, "é": false, "a,b": false, "a?b": false, "<b>": false,
		}
		long := strings.Repeat("c", 128)
		cases[long] = true
		cases[long+"c"] = false
		for in, want := range cases {
			var got bool
			run(t, `import('/format.js').then(m => m.validChannel(`+q(in)+`))`, &got)
			assert.Equal(t, want, got, "validChannel(%q)", in)
		}
	})

	t.Run("channel state", func(t *testing.T) {
		type view struct {
			Count    int      `json:"count"`
			Members  []string `json:"members"`
			Complete bool     `json:"complete"`
		}
		// Each step feeds one frame (null: none) to a client on a fake socket and reads the channel after it.
		var got []view
		run(t, fakeClient+`.then(({p, feed}) => {
			const out = [];
			const look = () => { const c = p.channel('lobby'); out.push({count: c.count, members: [...c.members].sort(), complete: c.complete}); };
			look();
			feed({type: 'joined', channel: 'lobby', count: 3, members: ['alice', 'bob', 'carol']}); look();
			feed({type: 'presence', channel: 'lobby', count: 3, joins: ['dave'], leaves: ['bob']}); look();
			// An edge the list already has changes nothing.
			feed({type: 'presence', channel: 'lobby', count: 3, joins: ['dave'], leaves: ['zed']}); look();
			// A big room: the count alone; the list stays, no longer complete.
			feed({type: 'presence', channel: 'lobby', count: 1500}); look();
			feed({type: 'presence', channel: 'lobby', count: 1499, joins: [], leaves: ['alice']}); look();
			// A bounded snapshot: count exact, fewer members listed.
			feed({type: 'joined', channel: 'lobby', count: 250, members: ['a', 'b']}); look();
			// A fresh full snapshot is complete again.
			feed({type: 'joined', channel: 'lobby', count: 2, members: ['a', 'b']}); look();
			feed({type: 'presence', channel: 'lobby', count: 1, leaves: ['a']}); look();
			// Junk in the lists is ignored.
			feed({type: 'presence', channel: 'lobby', count: 2, joins: [7, null, 'c']}); look();
			return out;
		})`, &got)
		want := []view{
			{Count: 0, Members: []string{}, Complete: false},
			{Count: 3, Members: []string{"alice", "bob", "carol"}, Complete: true},
			{Count: 3, Members: []string{"alice", "carol", "dave"}, Complete: true},
			{Count: 3, Members: []string{"alice", "carol", "dave"}, Complete: true},
			{Count: 1500, Members: []string{"alice", "carol", "dave"}, Complete: false},
			{Count: 1499, Members: []string{"carol", "dave"}, Complete: false},
			{Count: 250, Members: []string{"a", "b"}, Complete: false},
			{Count: 2, Members: []string{"a", "b"}, Complete: true},
			{Count: 1, Members: []string{"b"}, Complete: true},
			{Count: 2, Members: []string{"b", "c"}, Complete: true},
		}
		require.Len(t, got, len(want))
		for i := range want {
			assert.Equal(t, want[i], got[i], "step %d", i)
		}
	})

	t.Run("watch list", func(t *testing.T) {
		type change struct {
			UID    string `json:"uid"`
			Online bool   `json:"online"`
		}
		var got struct {
			UIDs    []string         `json:"uids"`
			Steps   [][]change       `json:"steps"`
			Final   map[string]*bool `json:"final"`
			Removed bool             `json:"removed"`
			Added   []bool           `json:"added"`
		}
		run(t, `import('/rooms.js').then(m => {
			const w = new m.WatchList();
			const added = [w.add('carol'), w.add('bob'), w.add('bob')];
			const steps = [];
			steps.push(w.watching({type: 'watching', online: ['bob']}, 1));
			steps.push(w.status({type: 'status', online: ['carol'], offline: ['bob']}, 2));
			// Repeats change nothing; users no longer watched are ignored.
			steps.push(w.status({type: 'status', online: ['carol', 'mallory'], offline: []}, 3));
			const removed = w.remove('carol');
			steps.push(w.status({type: 'status', offline: ['carol']}, 4));
			const final = Object.fromEntries([...w.users].map(([u, s]) => [u, s.online]));
			return {uids: w.uids(), steps, final, removed, added};
		})`, &got)
		assert.Equal(t, []bool{true, true, false}, got.Added)
		assert.True(t, got.Removed)
		assert.Equal(t, []string{"bob"}, got.UIDs, "sorted, as sent in a watch frame")
		no := false
		assert.Equal(t, [][]change{
			{{"bob", true}, {"carol", false}},
			{{"bob", false}, {"carol", true}},
			{},
			{},
		}, got.Steps)
		assert.Equal(t, map[string]*bool{"bob": &no}, got.Final)
	})

	t.Run("backoff", func(t *testing.T) {
		// Attempt n waits between half and all of min(15 s, 0.5 s * 2^n).
		var got [][2]float64
		run(t, `import('/presenced.js').then(m => Array.from({length: 12}, (_, n) => {
			let lo = Infinity, hi = 0;
			for (let i = 0; i < 200; i++) { const d = m.backoffDelay(n); lo = Math.min(lo, d); hi = Math.max(hi, d); }
			return [lo, hi];
		}))`, &got)
		require.Len(t, got, 12)
		for n, r := range got {
			base := min(15000, 500*float64(int(1)<<n))
			assert.GreaterOrEqual(t, r[0], base/2, "attempt %d", n)
			assert.LessOrEqual(t, r[1], base, "attempt %d", n)
			assert.Greater(t, r[1]-r[0], base/10, "attempt %d is jittered", n)
		}
	})

	t.Run("socketURL", func(t *testing.T) {
		var got string
		run(t, `import('/format.js').then(m => m.socketURL({uid: 'a b&c'}))`, &got)
		assert.Equal(t, "ws"+srv.URL[len("http"):]+"/ws?uid=a+b%26c", got)
		run(t, `import('/format.js').then(m => m.socketURL({uid: 'alice', channels: ['lobby', 'team:1/x#y'].join(',')}))`, &got)
		u, err := url.Parse(got)
		require.NoError(t, err)
		assert.Equal(t, "/ws", u.Path)
		assert.Equal(t, url.Values{"uid": {"alice"}, "channels": {"lobby,team:1/x#y"}}, u.Query(), "a server reads the channels back: %s", got)
	})

	t.Run("ring", func(t *testing.T) {
		// Three readings: the cursor steps 29 -> 30 -> 0 (a new turn) on a 31-slot ring.
		var got []struct {
			Slots, Counts, Due int
			Cursor, Total      string
			Rotate             string
			Labels             []string
		}
		run(t, `import('/ring.js').then(m => {
			const svg = document.getElementById('r');
			const v = new m.RingView(svg);
			const due = Array(31).fill(0); due[0] = 2; due[5] = 1; due[30] = 4;
			return [29, 30, 0].map(c => {
				v.update({slots: 31, tick_ms: 1000, cursor: c, due});
				return {
					slots: svg.querySelectorAll('.slot').length,
					counts: svg.querySelectorAll('.count').length,
					due: svg.querySelectorAll('.slot.due').length,
					cursor: svg.dataset.cursor, total: svg.dataset.total,
					rotate: svg.querySelector('.hand').style.transform,
					labels: [...svg.querySelectorAll('.count')].map(t => t.textContent).filter(Boolean),
				};
			});
		})`, &got)
		require.Len(t, got, 3)
		for _, g := range got {
			assert.Equal(t, 31, g.Slots)
			assert.Equal(t, 31, g.Counts)
			assert.Equal(t, 3, g.Due)
			assert.Equal(t, "7", g.Total)
			assert.Equal(t, []string{"2", "1", "4"}, g.Labels)
		}
		assert.Equal(t, []string{"29", "30", "0"}, []string{got[0].Cursor, got[1].Cursor, got[2].Cursor})
		// Clockwise through slot 0: 360 degrees, not back to 0.
		assert.Equal(t, []string{"rotate(336.774deg)", "rotate(348.387deg)", "rotate(360deg)"},
			[]string{got[0].Rotate, got[1].Rotate, got[2].Rotate})

		// Without the key, a server that has one sends no due counts: the
		// hand still turns, and the ring says why it counts nothing.
		var keyless struct {
			Cursor, Words string
			Due           int
		}
		run(t, `import('/ring.js').then(m => {
			const svg = document.getElementById('r');
			const v = new m.RingView(svg);
			v.update({slots: 31, tick_ms: 1000, cursor: 7});
			return {cursor: svg.dataset.cursor, due: svg.querySelectorAll('.slot.due').length,
				words: [...svg.querySelectorAll('text')].map(t => t.textContent).join('|')};
		})`, &keyless)
		assert.Equal(t, "7", keyless.Cursor)
		assert.Zero(t, keyless.Due)
		assert.Contains(t, keyless.Words, "counts need the API key")
	})

	assert.Empty(t, b.errors(), "console errors or exceptions")
}

// fakeClient is a promise of {p, feed, sent}: a Presenced client (from
// /presenced.js) on a fake socket, welcomed, having asked for the lobby;
// feed hands it a server frame, sent lists the frames it sent.
const fakeClient = `import('/presenced.js').then(async m => {
	let sock;
	class FakeSocket {
		constructor(url) { this.url = url; this.readyState = 1; this.sent = []; sock = this; }
		send(d) { this.sent.push(JSON.parse(d)); }
		close() { this.readyState = 3; }
	}
	const p = new m.Presenced({url: 'ws://example.invalid/ws', uid: 'me', channels: ['lobby'], WebSocket: FakeSocket});
	await null; // the client connects in a microtask
	const feed = (f) => sock.onmessage({data: JSON.stringify(f)});
	feed({type: 'welcome', uid: 'me', timeout_ms: 30000});
	return {p, feed, sent: () => sock.sent};
})`

func jsNum(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// moduleBrowser opens a blank page of web.Handler's origin in Chromium, so
// the page's modules can be imported there; run evaluates a promise in it
// and decodes its JSON value into v.
func moduleBrowser(t *testing.T) (b *browser, srv *httptest.Server, run func(t *testing.T, js string, v any)) {
	t.Helper()
	chromium := needChromium(t)
	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	// An empty page of the same origin, so module imports are allowed.
	mux.HandleFunc("/blank", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>t</title><link rel="icon" href="/favicon.svg"><svg id="r" viewBox="-140 -140 280 280"></svg>`))
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	b = startBrowser(t, chromium)
	do(t, b.ctx, "open", chromedp.Navigate(srv.URL+"/blank"))
	run = func(t *testing.T, js string, v any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](js, chromedp.EvalAwaitPromise))
		require.NoError(t, err, js)
		require.NoError(t, json.Unmarshal(raw, v), "%s returned %s", js, raw)
	}
	return b, srv, run
}
