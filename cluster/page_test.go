package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
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

// Members pages through a channel's members from Redis in the order Go
// sorts strings (bytes), whatever characters the IDs use, from any
// starting point, and counts all of them on every page.
func TestMembersPagesInOrder(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	var want []string
	for i := range 1234 {
		// IDs use every kind of character an ID may have, so their
		// order is bytes' order, not a locale's.
		uid := fmt.Sprintf("%c%03d%c", "-.0@A_a"[i%7], i, "zZ9_.@-"[i%5])
		want = append(want, uid)
		if i%2 == 0 {
			a.SetMember("lobby", uid, 1, false)
		} else {
			b.SetMember("lobby", uid, 1, false)
		}
	}
	slices.Sort(want)
	ctx := context.Background()
	eventually(t, "every membership written", func(c *assert.CollectT) {
		count, _, err := a.Members(ctx, "lobby", "", 1)
		assert.NoError(c, err)
		assert.Equal(c, len(want), count)
	})

	for _, limit := range []int{1000, 97} {
		var got []string
		for after := ""; ; {
			count, page, err := a.Members(ctx, "lobby", after, limit)
			require.NoError(t, err)
			assert.Equal(t, len(want), count)
			require.LessOrEqual(t, len(page), limit)
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			after = page[len(page)-1]
		}
		assert.Equal(t, want, got, "limit %d", limit)
	}

	for _, tc := range []struct {
		after string
		want  []string
	}{
		{"", want[:3]},
		{want[10], want[11:14]},
		{want[10] + "0", want[11:14]}, // between two members
		{want[len(want)-2], want[len(want)-1:]},
		{want[len(want)-1], []string{}},
		{"zzz", []string{}},
	} {
		_, page, err := b.Members(ctx, "lobby", tc.after, 3)
		require.NoError(t, err)
		assert.Equal(t, tc.want, page, "after %q", tc.after)
	}

	count, page, err := a.Members(ctx, "nobody-here", "", 10)
	require.NoError(t, err)
	assert.Zero(t, count)
	assert.Equal(t, []string{}, page)
	count, page, err = a.Members(ctx, "lobby", "", 0)
	require.NoError(t, err)
	assert.Equal(t, len(want), count, "limit 0 counts")
	assert.Empty(t, page)

	srv.kill()
	_, _, err = a.Members(ctx, "lobby", "", 10)
	assert.ErrorContains(t, err, `cluster: page members of "lobby"`)
}

// Two nodes on one Redis, 5,000 members of lobby held on both: a client on
// a joins, so its snapshot holds the first 100, and pages through the rest
// with members frames while members on both nodes leave and come back and
// a WebSocket on b joins and leaves, applying the diffs it receives. Once
// things settle it holds exactly the members Redis lists.
func TestPagingConvergesAcrossNodes(t *testing.T) {
	srv := startRedis(t)
	tc := transport.Config{Slots: 3000, Tick: 20 * time.Millisecond, PresenceLists: 10_000} // no lease ends within the test
	hsA, _, hubA := startHubConfig(t, testConfig(srv.client(t), "a"), tc, nil)
	hsB, _, hubB := startHubConfig(t, testConfig(srv.client(t), "b"), tc, nil)
	hubs := []*transport.Hub{hubA, hubB}
	for i := range 5000 {
		require.NoError(t, hubs[i%2].Node().Heartbeat(fmt.Sprintf("m%04d", i), []string{"lobby"}))
	}
	ctx := context.Background()
	eventually(t, "every membership written", func(c *assert.CollectT) {
		count, _, _, err := hubA.Node().Members(ctx, "lobby", "", 1)
		assert.NoError(c, err)
		assert.Equal(c, 5000, count)
	})

	var focus atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() { // leases on both nodes leave and come back, or come and leave
		for i := 0; !done.Load(); i++ {
			k := rand.IntN(5000)
			if i%2 == 0 {
				k = min(int(focus.Load())+1+rand.IntN(50), 4999) // where the client pages
			}
			first, then := []string{"lobby"}, []string(nil)
			if rand.IntN(2) == 0 {
				first, then = then, first
			}
			for _, channels := range [][]string{first, then} {
				assert.NoError(t, hubs[k%2].Node().Heartbeat(fmt.Sprintf("m%04d", k), channels))
				time.Sleep(time.Millisecond) // a pace, not a wait for anything
			}
		}
	})
	churner := dialURL(t, hsB.URL, "churner")
	wg.Go(func() {
		for i := 0; !done.Load(); i++ {
			frame := `{"type":"join","channel":"lobby"}`
			if i%2 == 1 {
				frame = `{"type":"leave","channel":"lobby"}`
			}
			assert.NoError(t, churner.WriteMessage(websocket.TextMessage, []byte(frame)))
			time.Sleep(time.Duration(20+rand.IntN(20)) * time.Millisecond) // under the frame rate
		}
	})
	go func() { // drain, so b never takes it for a slow reader
		for {
			if _, _, err := churner.ReadMessage(); err != nil {
				return
			}
		}
	}()

	pager := dialURL(t, hsA.URL, "pager&channels=lobby")
	frames := make(chan []byte, 1024)
	go func() {
		defer close(frames)
		for {
			_, data, err := pager.ReadMessage()
			if err != nil {
				return
			}
			frames <- data
		}
	}()
	next := func() []byte {
		select {
		case f, ok := <-frames:
			require.True(t, ok, "the pager's connection closed")
			return f
		case <-time.After(testWait):
			require.FailNow(t, "no frame for the pager")
			return nil
		}
	}
	list := &presencedtest.MemberList{Channel: "lobby"}
	for typ := ""; typ != "joined"; {
		var err error
		typ, err = list.Apply(next())
		require.NoError(t, err)
	}
	require.Len(t, list.Members(), 100, "the snapshot holds -member-list members")

	diffs, pages := 0, 0
	for !list.Complete {
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // pages anywhere in a tick
		list.Limit = 20 + rand.IntN(180)
		require.NoError(t, pager.WriteMessage(websocket.TextMessage,
			fmt.Appendf(nil, `{"type":"members","channel":"lobby","after":%q,"limit":%d}`, list.After, list.Limit)))
		for typ := ""; typ != "members"; {
			var err error
			typ, err = list.Apply(next())
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
	done.Store(true)
	wg.Wait()
	t.Logf("%d pages, %d diffs applied while paging", pages, diffs)
	require.Positive(t, diffs, "members came and went while the client paged")

	// Settled: the client's list is what Redis holds, as b's HTTP API
	// pages it.
	deadline := time.Now().Add(testWait)
	for {
	drain:
		for {
			select {
			case f := <-frames:
				_, err := list.Apply(f)
				require.NoError(t, err)
			default:
				break drain
			}
		}
		want := pageHTTP(t, hsB.URL, "lobby")
		if slices.Equal(want, list.Members()) && list.Count == len(want) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the client's list and Redis's: %d and %d members, %d counted",
			len(list.Members()), len(want), list.Count)
		time.Sleep(20 * time.Millisecond) // poll
	}
	assert.True(t, list.Complete)
}

// dialURL opens a WebSocket to the Hub at base as ?uid=query.
func dialURL(t *testing.T, base, query string) *websocket.Conn {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws?uid="+query, nil)
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { ws.Close() })
	return ws
}

// pageHTTP pages through channel with GET /api/channels/{channel} at base,
// 1,000 members a page, checking each page, and returns every member.
func pageHTTP(t *testing.T, base, channel string) []string {
	t.Helper()
	var all []string
	for after := ""; ; {
		resp, err := http.Get(base + "/api/channels/" + channel + "?limit=1000&after=" + after)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var page struct {
			Count   int      `json:"count"`
			Members []string `json:"members"`
			Next    *string  `json:"next"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		resp.Body.Close()
		require.LessOrEqual(t, len(page.Members), 1000)
		all = append(all, page.Members...)
		if page.Next == nil {
			return all
		}
		require.Equal(t, page.Members[len(page.Members)-1], *page.Next)
		after = *page.Next
	}
}
