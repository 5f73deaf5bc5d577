package transport_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sameButNames says whether two answers are the same once the user IDs
// named and the last-seen times are blanked: what one says of an invisible
// user, the other of a user really gone.
var namesAndTimes = regexp.MustCompile(`"(alice|carol)"|:1[0-9]{12}`)

func blank(s string) string { return namesAndTimes.ReplaceAllString(s, "X") }

// An invisible user is, to every other client, offline and a member of
// nothing, from the tick it turns invisible: a probe that asks in every way
// it can is answered as it is about carol, who really went offline at the
// same time.
func TestInvisibleIsOfflineToEveryProbe(t *testing.T) {
	var mu sync.Mutex
	var edges []string
	cfg := testConfig()
	cfg.FrameRate, cfg.FrameBurst = 1000, 1000 // the timing probe asks often
	cfg.OnPresence = func(uid string, online bool) {
		mu.Lock()
		defer mu.Unlock()
		edges = append(edges, map[bool]string{true: "+", false: "-"}[online]+uid)
	}
	s := startServer(t, cfg)
	alice := s.dialTypist(t, "alice", "lobby", "hideout")
	carol, _ := s.dialIn(t, "carol", "lobby")
	bobWS, _ := s.dialIn(t, "bob", "lobby")
	bob := listen(bobWS)
	send(t, bobWS, `{"type":"watch","uids":["alice","carol"]}`)
	bob.until(t, `{"type":"watching","online":["alice","carol"]}`)
	s.step(1)
	alice.typed(t, `{"type":"typing","channel":"lobby"}`)
	s.step(1)
	bob.until(t, `{"type":"typing","channel":"lobby","users":["alice"]}`)

	// 1-3. Turning invisible: the same leave, offline and last seen as
	// carol's going, and the typing ends.
	alice.typed(t, `{"type":"set","mode":"invisible"}`)
	require.NoError(t, carol.Close())
	require.Eventually(t, func() bool { return !s.user(t, "carol").Online }, waitLong, time.Millisecond)
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice","carol"]}`, bob.next(t), "1: the diff")
	for f := bob.next(t); ; f = bob.next(t) {
		if f == `{"type":"typing","channel":"lobby","users":[]}` {
			continue // 3: the typing ends, as a leave ends it
		}
		require.Equal(t, `{"type":"status","online":[],"offline":["alice","carol"]}`, f, "2: the status frame")
		break
	}
	// She still counts herself, and sees her own change.
	alice.w.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":["carol"],"updated":{"alice":{"mode":"invisible"}}}`)

	// 4. A watching frame, with the last seen of each.
	send(t, bobWS, `{"type":"watch","uids":["alice","carol"]}`)
	got := bob.next(t)
	assert.Equal(t, `{"type":"watching","online":[]}`, got, "4: watching")
	_, raw := s.getBody(t, "/api/presence/alice", "")
	_, rawCarol := s.getBody(t, "/api/presence/carol", "")
	// 5. The API without the key says the same of both.
	assert.Equal(t, blank(rawCarol), blank(raw), "5: /api/presence/{uid}")
	var user struct {
		Online   bool
		LastSeen int64 `json:"last_seen"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &user))
	assert.False(t, user.Online, "5")
	assert.NotZero(t, user.LastSeen, "5: last seen when she turned invisible")
	assert.NotContains(t, raw, "invisible", "5: no mode")

	probes := []struct{ name, frame string }{
		{"6: a joined snapshot", `{"type":"join","channel":"lobby"}`},
		{"7: a members page", `{"type":"members","channel":"lobby"}`},
		{"8: a members page after her", `{"type":"members","channel":"lobby","after":"alice"}`},
		{"9: a channel only she is in", `{"type":"join","channel":"hideout"}`},
	}
	for _, p := range probes {
		send(t, bobWS, p.frame)
		got := bob.next(t)
		assert.NotContains(t, got, "alice", p.name)
		assert.Contains(t, got, `"count":1,`, p.name) // bob alone
	}
	for _, path := range []string{"/api/presence", "/api/presence?limit=0", "/api/channels/lobby", "/api/channels/lobby?records=1", "/api/channels/hideout"} {
		code, body := s.getBody(t, path, "")
		assert.Equal(t, http.StatusOK, code, path)
		assert.NotContains(t, body, "alice", "10-14: %s", path)
		assert.Contains(t, body, `"count":1`, path) // bob alone
	}

	// 15-19. What she does while invisible shows nowhere: a join, an away,
	// a note, another tab, leaving and coming back. dave's join after it
	// all is the first thing bob hears.
	room := s.dialTypist(t, "bob2", "room")
	send(t, alice.ws, `{"type":"join","channel":"room"}`)
	alice.w.until(t, `{"type":"joined","channel":"room","count":2,"members":["alice","bob2"],"users":{"alice":{"mode":"invisible"}},"mode":"invisible"}`)
	alice.typed(t, `{"type":"activity","state":"away"}`, `{"type":"set","note":{"text":"hidden"}}`)
	tab, welcome := s.dial(t, "alice")
	assert.Equal(t, "invisible", welcome["mode"], "her own welcome says so")
	s.step(1)
	require.NoError(t, tab.Close())
	s.step(1)
	_, _ = s.dialIn(t, "dave", "lobby", "room")
	s.step(1)
	assert.Equal(t, `{"type":"presence","channel":"lobby","count":2,"joins":["dave"],"leaves":[]}`, bob.next(t), "15-19: nothing before dave")
	room.w.until(t, `{"type":"presence","channel":"room","count":2,"joins":["dave"],"leaves":[]}`)
	quiet(t, room.w, room.ws)

	// 21. An error names nobody: asking for the members of a channel not
	// joined that she is in is refused as for an empty one.
	send(t, bobWS, `{"type":"members","channel":"room"}`)
	errRoom := bob.next(t)
	send(t, bobWS, `{"type":"members","channel":"void"}`)
	assert.Equal(t, strings.Replace(bob.next(t), "void", "room", 1), errRoom, "21: the error")

	// 20. Answers come as fast either way: watching her or carol, the
	// server does the same work. Measured, not asserted (a busy machine
	// would make any bound flaky); the frames are the same.
	timing := func(uid string) time.Duration {
		var ds []time.Duration
		for range 50 {
			start := time.Now()
			send(t, bobWS, `{"type":"watch","uids":["`+uid+`"]}`)
			assert.Equal(t, `{"type":"watching","online":[]}`, bob.next(t), "20: "+uid)
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	t.Logf("median watch round trip: invisible %v, offline %v", timing("alice"), timing("carol"))
	send(t, bobWS, `{"type":"watch","uids":["alice","carol"]}`)
	assert.Equal(t, `{"type":"watching","online":[]}`, bob.next(t))

	// The server side sees the truth: she never went offline.
	mu.Lock()
	assert.NotContains(t, edges, "-alice")
	assert.Contains(t, edges, "-carol")
	mu.Unlock()

	// Visible again: the same join and online as carol's return, with
	// her record.
	alice.typed(t, `{"type":"set","mode":"online"}`)
	s.step(1)
	// The set made her active, as any set does.
	bob.until(t, `{"type":"presence","channel":"lobby","count":3,"joins":["alice"],"leaves":[],"users":{"alice":{"note":{"text":"hidden"}}}}`)
	bob.until(t, `{"type":"status","online":["alice"],"offline":[],"users":{"alice":{"note":{"text":"hidden"}}}}`)
}

// With the API key the server side sees an invisible user as it is.
func TestTheKeySeesInvisibleUsers(t *testing.T) {
	cfg := testConfig()
	cfg.APIKey = "k"
	s := startServer(t, cfg)
	alice, _ := s.dialIn(t, "alice", "lobby")
	w := listen(alice)
	send(t, alice, `{"type":"set","mode":"invisible"}`)
	w.sync(t)
	_, body := s.getBody(t, "/api/presence/alice", "apikey k")
	assert.JSONEq(t, `{"uid":"alice","online":true,"connections":1,"state":"active","mode":"invisible"}`, body)
	_, body = s.getBody(t, "/api/channels/lobby?records=1", "apikey k")
	assert.JSONEq(t, `{"channel":"lobby","count":1,"members":["alice"],"users":{"alice":{"mode":"invisible"}},"cursor":"CURSOR"}`, withCursor(t, body))
	_, body = s.getBody(t, "/api/presence", "apikey k")
	assert.JSONEq(t, `{"count":1,"users":["alice"],"cursor":"CURSOR"}`, withCursor(t, body))
}
