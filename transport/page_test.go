package transport_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/transport"
)

// fill makes n members of channel, held by heartbeat leases (a lease lasts
// the timeout), named prefix0000, prefix0001, ... in order; it returns them.
func fill(t *testing.T, hub *transport.Hub, channel, prefix string, n int) []string {
	t.Helper()
	uids := make([]string, n)
	for i := range uids {
		uids[i] = fmt.Sprintf("%s%04d", prefix, i)
		require.NoError(t, hub.Node().Heartbeat(uids[i], []string{channel}))
	}
	return uids
}

// channelPage is GET /api/channels/{channel} as it came: next absent or not.
type channelPage struct {
	Channel string   `json:"channel"`
	Count   int      `json:"count"`
	Members []string `json:"members"`
	Next    *string  `json:"next"`
}

// pageThrough pages through channel over HTTP with limit (0: the default)
// and returns every member, checking each page by the protocol's rules.
func pageThrough(t *testing.T, base, channel string, limit int) (count int, members []string) {
	t.Helper()
	want := limit
	if want == 0 {
		want = 100
	}
	after := ""
	for {
		q := url.Values{}
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
		}
		if after != "" || limit == 7 { // after= empty is the first page too
			q.Set("after", after)
		}
		resp, err := http.Get(base + "/api/channels/" + channel + "?" + q.Encode())
		require.NoError(t, err)
		var p channelPage
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		resp.Body.Close()
		require.Equal(t, channel, p.Channel)
		require.NotNil(t, p.Members, "members is an array")
		require.LessOrEqual(t, len(p.Members), want, "a page holds at most limit")
		members = append(members, p.Members...)
		count = p.Count
		if p.Next == nil {
			return count, members
		}
		require.Len(t, p.Members, want, "next only when more follow")
		require.Equal(t, p.Members[len(p.Members)-1], *p.Next, "next is the page's last")
		after = *p.Next
	}
}

// GET /api/channels/{channel}?limit=N&after=UID pages through a channel of
// 5,000 members: every page at most limit, next absent on the last, and the
// pages together the sorted set; a bad limit or after is 400.
func TestChannelPagesOverHTTP(t *testing.T) {
	s := startServer(t, testConfig()) // no step: the leases stay
	want := fill(t, s.hub, "lobby", "m", 5000)
	for _, limit := range []int{0, 1000, 333, 7} {
		count, got := pageThrough(t, s.srv.URL, "lobby", limit)
		assert.Equal(t, 5000, count, "limit %d", limit)
		assert.Equal(t, want, got, "limit %d", limit)
	}

	page := func(query string) channelPage {
		var p channelPage
		require.Equal(t, http.StatusOK, s.getJSON(t, "/api/channels/"+query, &p), query)
		return p
	}
	p := page("lobby?after=m4998")
	assert.Equal(t, []string{"m4999"}, p.Members)
	assert.Nil(t, p.Next)
	p = page("lobby?after=m4999&limit=1000")
	assert.Equal(t, 5000, p.Count)
	assert.Equal(t, []string{}, p.Members, "after the last member: an empty page")
	assert.Nil(t, p.Next)
	p = page("lobby?after=m0001x&limit=2")
	assert.Equal(t, []string{"m0002", "m0003"}, p.Members, "after an ID that is not a member")
	require.NotNil(t, p.Next)
	assert.Equal(t, "m0003", *p.Next)
	assert.Equal(t, channelPage{Channel: "nobody", Count: 0, Members: []string{}}, page("nobody?limit=5"))

	for _, tc := range []struct{ query, says string }{
		{"limit=0", "limit"},
		{"limit=-1", "limit"},
		{"limit=1001", "limit"},
		{"limit=x", "limit"},
		{"limit=2.5", "limit"},
		{"limit=1e3", "limit"},
		{"after=a%20b", "after"},
		{"after=" + strings.Repeat("u", 65), "after"},
		{"after=%C3%A9", "after"},
	} {
		status, msg := s.getError(t, "/api/channels/lobby?"+tc.query)
		assert.Equal(t, http.StatusBadRequest, status, tc.query)
		assert.Contains(t, msg, tc.says, tc.query)
	}
}

// The paged listing is the server API: with a key it needs the key.
func TestChannelPagesNeedTheAPIKey(t *testing.T) {
	cfg := testConfig()
	cfg.APIKey = "k"
	s := startServer(t, cfg)
	fill(t, s.hub, "lobby", "m", 3)
	status, _ := s.do(t, http.MethodGet, "/api/channels/lobby?limit=2&after=m0000", nil, "")
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _ = s.do(t, http.MethodGet, "/api/channels/lobby?limit=2&after=m0000", nil, "apikey k")
	assert.Equal(t, http.StatusOK, status)
}

// A member asks for pages with members frames and gets the same pages as
// the HTTP API; a connection that has not joined the channel gets an error
// frame naming it, and a bad limit or after a parse error.
func TestChannelPagesOverWebSocket(t *testing.T) {
	s := startServer(t, testConfig())
	fill(t, s.hub, "lobby", "m", 250)
	ws, snapshot := s.dialIn(t, "alice", "lobby")
	assert.Contains(t, snapshot[0], `"count":251,`)
	w := listen(ws)

	for _, tc := range []struct{ ask, want string }{
		{`{"type":"members","channel":"lobby","after":"","limit":2}`, `{"type":"members","channel":"lobby","count":251,"members":["alice","m0000"],"next":"m0000"}`},
		{`{"type":"members","channel":"lobby","after":"m0000","limit":2}`, `{"type":"members","channel":"lobby","count":251,"members":["m0001","m0002"],"next":"m0002"}`},
		{`{"type":"members","channel":"lobby","after":"m0247"}`, `{"type":"members","channel":"lobby","count":251,"members":["m0248","m0249"]}`},
		{`{"type":"members","channel":"lobby","after":"m0249","limit":1000}`, `{"type":"members","channel":"lobby","count":251,"members":[]}`},
		{`{"type":"members","channel":"elsewhere"}`, `{"type":"error","error":"not a member of the channel: join it first","channel":"elsewhere"}`},
		{`{"type":"members","channel":"lobby","limit":0}`, `{"type":"error","error":"members \"limit\" must be a whole number from 1 to 1000","channel":"lobby"}`},
		{`{"type":"members","channel":"lobby","limit":1001}`, `{"type":"error","error":"members \"limit\" must be a whole number from 1 to 1000","channel":"lobby"}`},
		{`{"type":"members","channel":"lobby","after":"a b"}`, `{"type":"error","error":"invalid user ID \"a b\" in \"after\": 1 to 64 letters, digits or _.-@, or \"\" for the first page","channel":"lobby"}`},
		{`{"type":"members","after":"m0001"}`, `{"type":"error","error":"members needs a \"channel\""}`},
	} {
		send(t, ws, tc.ask)
		assert.Equal(t, tc.want, w.next(t), tc.ask)
	}

	// The WebSocket pages are the HTTP API's pages.
	var p channelPage
	require.Equal(t, http.StatusOK, s.getJSON(t, "/api/channels/lobby?after=m0000&limit=2", &p))
	assert.Equal(t, []string{"m0001", "m0002"}, p.Members)

	send(t, ws, `{"type":"leave","channel":"lobby"}`)
	assert.Equal(t, `{"type":"left","channel":"lobby"}`, w.next(t))
	send(t, ws, `{"type":"members","channel":"lobby"}`)
	assert.Equal(t, `{"type":"error","error":"not a member of the channel: join it first","channel":"lobby"}`, w.next(t))
	assert.Equal(t, 4.0, metric(t, s.reg, "presenced_frames_sent_total", map[string]string{"type": "members"}))
}

// A members frame counts toward the inbound limits like any other.
func TestMembersFramesAreRateLimited(t *testing.T) {
	cfg := testConfig()
	cfg.FrameRate, cfg.FrameBurst = 0.001, 3
	s := startServer(t, cfg)
	ws, _ := s.dialIn(t, "alice", "lobby")
	for range 5 {
		send(t, ws, `{"type":"members","channel":"lobby"}`)
	}
	for range 3 {
		assert.Equal(t, `{"type":"members","channel":"lobby","count":1,"members":["alice"]}`, readRaw(t, ws))
	}
	assert.Contains(t, readRaw(t, ws), "too many messages")
}

// The big-channel case: a client joins a channel of 5,000 members, so its
// snapshot holds the first 100, and pages through the rest with members
// frames while other clients join and leave the channel, applying the
// presence diffs it receives. Once things settle it holds exactly the
// server's members. The channel's diffs carry lists (-presence-lists above
// its size), and the clock ticks every 20 ms, so pages fall mid-tick.
func TestPagingConvergesWhileMembersComeAndGo(t *testing.T) {
	s := startServerWith(t, transport.Config{Slots: 3000, Tick: 20 * time.Millisecond, PresenceLists: 10_000},
		serverOptions{clock: true}) // a 60 s timeout: no lease ends within the test
	fill(t, s.hub, "lobby", "m", 5000)

	var focus atomic.Int64
	stop := churn(t, s.hub, 5000, &focus, func() (*websocket.Conn, error) {
		return s.connect(dialer(0), fmt.Sprintf("m%04dw", rand.IntN(5000)))
	})
	ws, snapshot := s.dialIn(t, "pager", "lobby")
	list := &presencedtest.MemberList{Channel: "lobby"}
	_, err := list.Apply([]byte(snapshot[0]))
	require.NoError(t, err)
	require.Len(t, list.Members(), 100, "the snapshot holds -member-list members")
	require.False(t, list.Complete)
	w := listen(ws)

	diffs, pages := 0, 0
	for !list.Complete {
		// A pause, as a client scrolling a list makes, so that pages fall
		// anywhere in a tick, not just after a diff.
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		list.Limit = 20 + rand.IntN(180)
		send(t, ws, fmt.Sprintf(`{"type":"members","channel":"lobby","after":%q,"limit":%d}`, list.After, list.Limit))
		for typ := ""; typ != "members"; {
			var err error
			typ, err = list.Apply([]byte(w.next(t)))
			require.NoError(t, err)
			if typ == "presence" {
				diffs++
			}
		}
		pages++
		if k, err := strconv.Atoi(strings.TrimPrefix(list.After, "m")); err == nil {
			focus.Store(int64(k))
		}
	}
	stop()
	t.Logf("%d pages, %d diffs applied while paging", pages, diffs)
	require.Positive(t, diffs, "members came and went while the client paged")

	settled(t, list, w, func() []string {
		_, members := pageThrough(t, s.srv.URL, "lobby", 1000)
		return members
	})
}

// settled waits until list, applying what w receives, holds exactly the
// members that server lists.
func settled(t *testing.T, list *presencedtest.MemberList, w *listener, server func() []string) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		drain(t, list, w)
		want := server()
		// Complete too: a count-only diff of the churn's last leaves may come
		// after a pass that already matched.
		if assert.ObjectsAreEqual(want, list.Members()) && list.Count == len(want) && list.Complete {
			break
		}
		require.True(t, time.Now().Before(deadline), "the client's list and the server's: %d and %d members, %d counted",
			len(list.Members()), len(want), list.Count)
		time.Sleep(20 * time.Millisecond) // poll
	}
	assert.True(t, list.Complete)
}

// drain applies to list the frames w has received.
func drain(t *testing.T, list *presencedtest.MemberList, w *listener) {
	t.Helper()
	for {
		select {
		case f, ok := <-w.frames:
			require.True(t, ok, "connection closed")
			_, err := list.Apply([]byte(f))
			require.NoError(t, err)
		default:
			return
		}
	}
}

// pass pages through list's channel from the first member, applying the
// frames that come meanwhile.
func pass(t *testing.T, ws *websocket.Conn, w *listener, list *presencedtest.MemberList) {
	t.Helper()
	list.After, list.Limit = "", 1000
	for first := true; first || list.After != ""; first = false {
		send(t, ws, fmt.Sprintf(`{"type":"members","channel":%q,"after":%q,"limit":%d}`, list.Channel, list.After, list.Limit))
		for typ := ""; typ != "members"; {
			var err error
			typ, err = list.Apply([]byte(w.next(t)))
			require.NoError(t, err)
		}
	}
}

// churn makes members come and go in lobby until the returned stop is
// called: the heartbeat leases of the n members fill made leave and come
// back, or come and leave, a moment apart (two edges in one tick, often on
// either side of a page), half of them just after the index in focus, if
// set, where the client pages; and WebSockets that dial makes join and
// leave with frames.
func churn(t *testing.T, hub *transport.Hub, n int, focus *atomic.Int64, dial func() (*websocket.Conn, error)) (stop func()) {
	t.Helper()
	var (
		done atomic.Bool
		wg   sync.WaitGroup
		errs = make(chan error, 16)
	)
	wg.Go(func() {
		for i := 0; !done.Load(); i++ {
			k := rand.IntN(n)
			if focus != nil && i%2 == 0 {
				k = min(int(focus.Load())+1+rand.IntN(50), n-1)
			}
			uid := fmt.Sprintf("m%04d", k)
			first, then := []string{"lobby"}, []string(nil) // out of the channel, still online
			if rand.IntN(2) == 0 {
				first, then = then, first
			}
			for _, channels := range [][]string{first, then} {
				if err := hub.Node().Heartbeat(uid, channels); err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Millisecond) // a pace, not a wait for anything
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			ws, err := dial()
			if err != nil {
				errs <- err
				return
			}
			defer ws.Close()
			go func() { // drain, so the server never takes it for a slow reader
				for {
					if _, _, err := ws.ReadMessage(); err != nil {
						return
					}
				}
			}()
			for i := 0; !done.Load(); i++ {
				frame := `{"type":"join","channel":"lobby"}`
				if i%2 == 1 {
					frame = `{"type":"leave","channel":"lobby"}`
				}
				if err := ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(20+rand.IntN(20)) * time.Millisecond) // under the frame rate, 50/s
			}
		})
	}
	return func() {
		done.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			assert.NoError(t, err)
		}
	}
}

// In a channel over -presence-lists members the diffs carry the count only,
// so a list cannot be kept from them: a count-only diff makes it incomplete,
// and the client pages through again. Once the churn is over, a pass from
// the first member holds exactly the server's members.
func TestPagingACountOnlyChannelAgain(t *testing.T) {
	s := startServerWith(t, transport.Config{Slots: 3000, Tick: 20 * time.Millisecond, PresenceLists: 1000},
		serverOptions{clock: true})
	fill(t, s.hub, "lobby", "m", 1500)
	ws, snapshot := s.dialIn(t, "pager", "lobby")
	list := &presencedtest.MemberList{Channel: "lobby"}
	_, err := list.Apply([]byte(snapshot[0]))
	require.NoError(t, err)
	w := listen(ws)
	pass(t, ws, w, list)
	require.True(t, list.Complete)
	_, want := pageThrough(t, s.srv.URL, "lobby", 1000)
	require.Equal(t, want, list.Members(), "no churn yet")

	stop := churn(t, s.hub, 1500, nil, func() (*websocket.Conn, error) {
		return s.connect(dialer(0), fmt.Sprintf("m%04dw", rand.IntN(1500)))
	})
	for list.Complete { // until a count-only diff
		_, err := list.Apply([]byte(w.next(t)))
		require.NoError(t, err)
	}
	stop()

	settled(t, list, w, func() []string {
		if !list.Complete || list.Count != len(list.Members()) {
			pass(t, ws, w, list) // the count changed: page again
		}
		_, members := pageThrough(t, s.srv.URL, "lobby", 1000)
		return members
	})
}

// A client of a channel of 1,000 members with 64-character IDs asks for 20
// full pages in one write: 1.2 KB in, 1.35 MB out, within every inbound
// limit. The answers of one read wait for the read to be handled, and the
// writer may not start on them meanwhile, so they must not count as a
// queue the client is too slow to drain: it gets its 20 pages and stays.
func TestMembersPagesAskedInOneWriteAllArrive(t *testing.T) {
	const pages, members = 20, 1000
	prefix := strings.Repeat("m", 60)
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ParkReaders = mode.park
			s := startServer(t, cfg)
			fill(t, s.hub, "c", prefix, members-1)
			uid := strings.Repeat("u", 64)
			c, br := s.rawJoined(t, uid, "c")

			ask := clientFrame(fin|opText, []byte(`{"type":"members","channel":"c","limit":1000}`))
			var all []byte
			for range pages {
				all = append(all, ask...)
			}
			write(t, c, all)
			total := 0
			for i := range pages {
				op, payload := serverFrame(t, c, br)
				require.Equal(t, opText, op, "page %d: want a text frame, got opcode %d: %q", i, op, payload)
				var page struct {
					Type    string   `json:"type"`
					Members []string `json:"members"`
				}
				require.NoError(t, json.Unmarshal(payload, &page), "page %d", i)
				require.Equal(t, "members", page.Type, "page %d: %.200s", i, payload)
				require.Len(t, page.Members, members, "page %d", i)
				total += len(payload)
			}
			t.Logf("%d pages, %d bytes", pages, total)
			write(t, c, clientFrame(fin|opText, appPing))
			assert.Equal(t, `{"type":"pong"}`, string(serverFrameOf(t, c, br, opText)), "still served")
			assert.Zero(t, metric(t, s.reg, "presenced_closes_total", map[string]string{"reason": "slow"}))
		})
	}
}
