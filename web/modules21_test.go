package web_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestModules21InBrowser runs the models and helpers behind what the page
// shows of protocol v2.1: away members, paging a big room while diffs
// arrive, watched users' away and last seen, who is typing, and the pace of
// typing frames.
func TestModules21InBrowser(t *testing.T) {
	b, _, run := moduleBrowser(t)

	t.Run("channel away", func(t *testing.T) {
		type view struct {
			Members []string `json:"members"`
			Away    []string `json:"away"`
		}
		var got []view
		run(t, fakeClient+`.then(({p, feed}) => {
			const out = [];
			const look = () => { const c = p.channel('lobby'); out.push({members: [...c.members].sort(), away: [...c.away].sort()}); };
			// Away names that are not members are ignored.
			feed({type: 'joined', channel: 'lobby', count: 3, members: ['alice', 'bob', 'carol'], away: ['bob', 'zed']}); look();
			// A user who joins already away is in joins and away.
			feed({type: 'presence', channel: 'lobby', count: 4, joins: ['dave'], away: ['alice', 'dave'], active: ['bob']}); look();
			// A member who leaves is no longer away; a repeated edge changes nothing.
			feed({type: 'presence', channel: 'lobby', count: 3, leaves: ['alice'], away: ['dave']}); look();
			// A count-only diff carries no activity.
			feed({type: 'presence', channel: 'lobby', count: 9}); look();
			return out;
		})`, &got)
		assert.Equal(t, []view{
			{Members: []string{"alice", "bob", "carol"}, Away: []string{"bob"}},
			{Members: []string{"alice", "bob", "carol", "dave"}, Away: []string{"alice", "dave"}},
			{Members: []string{"bob", "carol", "dave"}, Away: []string{"dave"}},
			{Members: []string{"bob", "carol", "dave"}, Away: []string{"dave"}},
		}, got)
	})

	t.Run("channel paged while diffs arrive", func(t *testing.T) {
		type view struct {
			Members  []string         `json:"members"`
			Away     []string         `json:"away"`
			Count    int              `json:"count"`
			Complete bool             `json:"complete"`
			Asked    []map[string]any `json:"asked"`
		}
		var got []view
		// The channel: a b c d e f g h (8). The snapshot lists 3, so pages hold 3.
		// Each step feeds a frame and reads the channel and the pages asked for since the last step.
		run(t, fakeClient+`.then(async ({p, feed, sent}) => {
			const out = [];
			let seen = sent().length;
			const look = () => {
				const c = p.channel('lobby');
				const asked = sent().slice(seen).filter(f => f.type === 'members').map(({after, limit}) => ({after, limit}));
				seen = sent().length;
				out.push({members: [...c.members].sort(), away: [...c.away].sort(), count: c.count, complete: c.complete, asked});
			};
			feed({type: 'joined', channel: 'lobby', count: 8, members: ['a', 'b', 'c']}); look();
			// Before the mark a join is listed; past it, it waits for its page.
			feed({type: 'presence', channel: 'lobby', count: 10, joins: ['bb', 'x'], leaves: []}); look();
			const loaded = p.loadMembers('lobby'); look();
			feed({type: 'members', channel: 'lobby', count: 10, members: ['d', 'e', 'f'], next: 'f', away: ['e']}); look();
			// The mark left: the next page still starts after it.
			feed({type: 'presence', channel: 'lobby', count: 8, leaves: ['f', 'a']}); look();
			feed({type: 'members', channel: 'lobby', count: 8, members: ['g', 'h', 'x']}); look();
			await loaded;
			// Complete: every join is listed from now on.
			feed({type: 'presence', channel: 'lobby', count: 9, joins: ['zz']}); look();
			// Count-only diffs make it stale: a new pass starts from the first member.
			feed({type: 'presence', channel: 'lobby', count: 10}); look();
			const page = p.loadPage('lobby'); look();
			feed({type: 'members', channel: 'lobby', count: 10, members: ['b', 'bb', 'c'], next: 'c'}); look();
			await page;
			return out;
		})`, &got)
		asked := func(after string) []map[string]any { return []map[string]any{{"after": after, "limit": 3.0}} }
		none := []map[string]any{}
		want := []view{
			{Members: []string{"a", "b", "c"}, Away: []string{}, Count: 8, Asked: none},
			{Members: []string{"a", "b", "bb", "c"}, Away: []string{}, Count: 10, Asked: none},
			{Members: []string{"a", "b", "bb", "c"}, Away: []string{}, Count: 10, Asked: asked("c")},
			{Members: []string{"a", "b", "bb", "c", "d", "e", "f"}, Away: []string{"e"}, Count: 10, Asked: asked("f")},
			{Members: []string{"b", "bb", "c", "d", "e"}, Away: []string{"e"}, Count: 8, Asked: none},
			{Members: []string{"b", "bb", "c", "d", "e", "g", "h", "x"}, Away: []string{"e"}, Count: 8, Complete: true, Asked: none},
			{Members: []string{"b", "bb", "c", "d", "e", "g", "h", "x", "zz"}, Away: []string{"e"}, Count: 9, Complete: true, Asked: none},
			{Members: []string{"b", "bb", "c", "d", "e", "g", "h", "x", "zz"}, Away: []string{"e"}, Count: 10, Asked: none},
			{Members: []string{"b", "bb", "c", "d", "e", "g", "h", "x", "zz"}, Away: []string{"e"}, Count: 10, Asked: asked("")},
			// Loaded in full once, the channel goes on to the end by itself.
			{Members: []string{"b", "bb", "c"}, Away: []string{}, Count: 10, Asked: asked("c")},
		}
		require.Len(t, got, len(want))
		for i := range want {
			assert.Equal(t, want[i], got[i], "step %d", i)
		}
	})

	t.Run("watch list away and last seen", func(t *testing.T) {
		type user struct {
			Online   *bool   `json:"online"`
			Away     bool    `json:"away"`
			LastSeen float64 `json:"lastSeen"`
		}
		type change struct {
			UID  string `json:"uid"`
			Kind string `json:"kind"`
		}
		var got struct {
			Steps  [][]change        `json:"steps"`
			Users  []map[string]user `json:"users"`
			Unseen [][]string        `json:"unseen"`
			Took   []bool            `json:"took"`
		}
		run(t, `import('/rooms.js').then(m => {
			const w = new m.WatchList();
			for (const u of ['bob', 'carol', 'dave']) w.add(u);
			const steps = [], users = [], unseen = [], took = [];
			const look = (c) => { steps.push(c); users.push(JSON.parse(JSON.stringify(Object.fromEntries(w.users)))); unseen.push(w.unseen()); };
			look(w.watching({type: 'watching', online: ['bob', 'carol'], away: ['carol']}, 1));
			look(w.status({type: 'status', online: [], offline: ['bob'], away: ['dave'], active: ['carol'], last_seen: {bob: 1764000000000}}, 2));
			// The HTTP answer for dave, offline since before the watch; not for a user online.
			took.push(w.lastSeen('dave', 1763999000000), w.lastSeen('carol', 5), w.lastSeen('dave', null));
			look([]);
			// Back online, and away in the same tick: the old last seen is gone.
			look(w.status({type: 'status', online: ['bob'], offline: [], away: ['bob']}, 3));
			return {steps, users, unseen, took};
		})`, &got)
		yes, no := true, false
		assert.Equal(t, [][]change{
			{{"bob", "online"}, {"carol", "online"}, {"carol", "away"}, {"dave", "offline"}},
			{{"bob", "offline"}, {"carol", "active"}},
			{},
			{{"bob", "online"}, {"bob", "away"}},
		}, got.Steps)
		assert.Equal(t, []map[string]user{
			{"bob": {Online: &yes}, "carol": {Online: &yes, Away: true}, "dave": {Online: &no}},
			{"bob": {Online: &no, LastSeen: 1764000000000}, "carol": {Online: &yes}, "dave": {Online: &no}},
			{"bob": {Online: &no, LastSeen: 1764000000000}, "carol": {Online: &yes}, "dave": {Online: &no, LastSeen: 1763999000000}},
			{"bob": {Online: &yes, Away: true}, "carol": {Online: &yes}, "dave": {Online: &no, LastSeen: 1763999000000}},
		}, got.Users)
		assert.Equal(t, [][]string{{"dave"}, {"dave"}, {}, {}}, got.Unseen, "offline users with no last seen, to ask the server")
		assert.Equal(t, []bool{true, false, false}, got.Took)
	})

	t.Run("typingText", func(t *testing.T) {
		cases := []struct {
			users []string
			count int
			want  string
		}{
			{[]string{}, 0, ""},
			{[]string{"me"}, 1, ""},
			{[]string{"alice"}, 1, "alice is typing…"},
			{[]string{"alice", "me"}, 2, "alice is typing…"},
			{[]string{"alice", "bob"}, 2, "alice and bob are typing…"},
			{[]string{"alice", "bob", "carol"}, 3, "alice, bob and carol are typing…"},
			{[]string{"alice", "bob", "carol", "me"}, 4, "alice, bob and carol are typing…"},
			{[]string{"alice", "bob", "carol", "dave"}, 4, "several people are typing…"},
			{[]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}, 12, "several people are typing…"},
		}
		for _, c := range cases {
			var got string
			run(t, `import('/format.js').then(m => m.typingText(`+jsJSON(c.users)+`, `+jsJSON(c.count)+`, 'me'))`, &got)
			assert.Equal(t, c.want, got, "%v count %d", c.users, c.count)
		}
	})

	t.Run("fmtAgo", func(t *testing.T) {
		cases := map[float64]string{
			-5: "just now", 0: "just now", 59999: "just now", 60000: "1 min ago", 150000: "2 min ago",
			3599999: "59 min ago", 3600000: "1 h ago", 86399999: "23 h ago", 86400000: "1 d ago",
		}
		for in, want := range cases {
			var got string
			run(t, `import('/format.js').then(m => m.fmtAgo(`+jsNum(in)+`))`, &got)
			assert.Equal(t, want, got, "fmtAgo(%v)", in)
		}
	})

	t.Run("Throttle", func(t *testing.T) {
		// Keys pressed at these times (ms) in one room, a chat at 4500, and
		// one key in another room: what goes out.
		var got []bool
		run(t, `import('/format.js').then(m => {
			const th = new m.Throttle(2000);
			const out = [0, 100, 1999, 2000, 2500, 4100].map(at => th.due('lobby', at));
			out.push(th.due('room', 2500));
			th.reset('lobby');
			out.push(th.due('lobby', 4500), th.due('lobby', 4600));
			return out;
		})`, &got)
		assert.Equal(t, []bool{true, false, false, true, false, true, true, true, false}, got)
	})

	assert.Empty(t, b.errors(), "console errors or exceptions")
}

func jsJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
