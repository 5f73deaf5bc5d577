package vismodel

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// checkConn compares what c believes with what its user may know.
func (m *model) checkConn(c *mconn) error {
	if got, want := slices.Sorted(maps.Keys(c.obs.chans)), slices.Sorted(maps.Keys(c.joined)); !slices.Equal(got, want) {
		return fmt.Errorf("channels %v, joined %v", got, want)
	}
	for ch := range c.joined {
		want := m.visibleMembers(ch)
		if m.member(c.uid, ch) && !slices.Contains(want, c.uid) {
			want = append(want, c.uid) // it sees itself, invisible or not
			slices.Sort(want)
		}
		got := slices.Sorted(maps.Keys(c.obs.chans[ch]))
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s: members %v, want %v", ch, got, want)
		}
		if c.obs.count[ch] != len(want) {
			return fmt.Errorf("%s: count %d, want %d", ch, c.obs.count[ch], len(want))
		}
		for _, uid := range want {
			if got, want := c.obs.recs[ch][uid], m.record(uid, uid == c.uid); !got.Equal(want) {
				return fmt.Errorf("%s: record of %s %s, want %s", ch, uid, recString(got), recString(want))
			}
		}
	}
	for _, uid := range c.watch {
		vis := m.visible(uid)
		if c.obs.online[uid] != vis {
			return fmt.Errorf("watch: %s online %v, want %v", uid, c.obs.online[uid], vis)
		}
		if vis {
			if got, want := c.obs.recs[""][uid], m.record(uid, false); !got.Equal(want) {
				return fmt.Errorf("watch: record of %s %s, want %s", uid, recString(got), recString(want))
			}
			continue
		}
		// A tick nets an online and an offline away, so a watcher may
		// know an older last seen, or none: never a later one.
		if at, has := c.obs.lastSeen[uid]; has {
			if lo, hi, ok := m.lastSeen(uid); !ok || at > hi {
				return fmt.Errorf("watch: last seen of %s %d, want none later than [%d, %d]", uid, at, lo, hi)
			}
		}
	}
	return nil
}

// checkSeen checks a last seen shown of uid (has false: none shown).
func checkSeen(m *model, uid string, at int64, has bool) error {
	lo, hi, ok := m.lastSeen(uid)
	switch {
	case has != ok:
		return fmt.Errorf("last seen of %s shown %v (%d), want shown %v", uid, has, at, ok)
	case ok && (at < lo || at > hi):
		return fmt.Errorf("last seen of %s %d, want in [%d, %d] (%+d ms)", uid, at, lo, hi, at-hi)
	}
	return nil
}

// checkKeyless compares every node's keyless answers with the model.
func (m *model) checkKeyless() error {
	for i, n := range m.env.Nodes {
		if err := m.checkKeylessOf(n); err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
	}
	return nil
}

func (m *model) checkKeylessOf(n *presence.Node) error {
	ctx := context.Background()
	var online []string
	for uid := range m.users {
		st, err := n.VisibleStatus(ctx, uid)
		if err != nil {
			return err
		}
		if m.visible(uid) {
			online = append(online, uid)
			if st.Conns != m.liveConns(uid) || !st.LastSeen.IsZero() {
				return fmt.Errorf("status of %s: %d connections, last seen %v; want %d, none", uid, st.Conns, st.LastSeen, m.liveConns(uid))
			}
			if want := m.record(uid, false); !st.Record.Equal(want) {
				return fmt.Errorf("status of %s: record %s, want %s", uid, recString(st.Record), recString(want))
			}
			continue
		}
		if st.Conns != 0 || !st.Record.IsZero() {
			return fmt.Errorf("status of %s: %d connections, record %s; want offline, {}", uid, st.Conns, recString(st.Record))
		}
		if err := checkSeen(m, uid, st.LastSeen.UnixMilli(), !st.LastSeen.IsZero()); err != nil {
			return fmt.Errorf("status: %w", err)
		}
	}
	slices.Sort(online)
	count, list, err := n.VisibleUsers(ctx, 100)
	if err != nil {
		return err
	}
	if count != len(online) || !slices.Equal(orEmpty(list), orEmpty(online)) {
		return fmt.Errorf("users: %d %v, want %d %v", count, list, len(online), online)
	}
	for _, ch := range channels {
		count, members, _, err := n.VisibleMembers(ctx, ch, "", 100)
		if err != nil {
			return err
		}
		if want := m.visibleMembers(ch); count != len(want) || !slices.Equal(orEmpty(members), want) {
			return fmt.Errorf("members of %s: %d %v, want %d %v", ch, count, members, len(want), want)
		}
	}
	return nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func recString(r protocol.Record) string {
	b, _ := json.Marshal(r)
	return string(b)
}

// observer is what one connection believes, from its frames alone. It keeps
// records by where it heard them (a channel, or "" for its watch list):
// each channel's diffs net a record's changes against what that channel's
// frames said, not against what another channel's snapshot said.
type observer struct {
	chans    map[string]map[string]bool
	count    map[string]int
	recs     map[string]map[string]protocol.Record
	online   map[string]bool // watched users
	lastSeen map[string]int64
	shown    []sighting // the users the last frame showed present
}

// take applies one frame; watch is the connection's watch list.
func (o *observer) take(frame string, watch []string) error {
	var f struct {
		Type, Channel                           string
		Count                                   int
		Members, Joins, Leaves, Online, Offline []string
		Users, Updated                          map[string]protocol.Record
		LastSeen                                map[string]int64 `json:"last_seen"`
	}
	if err := json.Unmarshal([]byte(frame), &f); err != nil {
		return err
	}
	if o.chans == nil {
		o.chans, o.count, o.recs = map[string]map[string]bool{}, map[string]int{}, map[string]map[string]protocol.Record{}
		o.online, o.lastSeen = map[string]bool{}, map[string]int64{}
	}
	recs := o.recs[f.Channel]
	if recs == nil {
		recs = map[string]protocol.Record{}
		o.recs[f.Channel] = recs
	}
	switch f.Type {
	case "welcome":
	case "joined":
		o.chans[f.Channel] = map[string]bool{}
		o.count[f.Channel] = f.Count
		for _, u := range f.Members {
			o.shown = append(o.shown, sighting{f.Channel, u})
			o.chans[f.Channel][u] = true
			recs[u] = f.Users[u]
		}
	case "left":
		delete(o.chans, f.Channel)
		delete(o.count, f.Channel)
		delete(o.recs, f.Channel)
	case "presence":
		members := o.chans[f.Channel]
		if members == nil {
			return fmt.Errorf("a diff of a channel not joined: %s", frame)
		}
		o.count[f.Channel] = f.Count
		for _, u := range f.Joins {
			if members[u] {
				return fmt.Errorf("a repeated join: %s", frame)
			}
			o.shown = append(o.shown, sighting{f.Channel, u})
			members[u] = true
			recs[u] = f.Users[u]
		}
		for _, u := range f.Leaves {
			if !members[u] {
				return fmt.Errorf("a leave of a non-member: %s", frame)
			}
			delete(members, u)
		}
	case "watching":
		clear(o.online)
		clear(o.lastSeen)
		for _, u := range watch {
			o.online[u] = false
		}
		for _, u := range f.Online {
			o.shown = append(o.shown, sighting{"", u})
			o.online[u] = true
			recs[u] = f.Users[u]
		}
		maps.Copy(o.lastSeen, f.LastSeen)
	case "status":
		for _, u := range f.Online {
			o.shown = append(o.shown, sighting{"", u})
			o.online[u] = true
			recs[u] = f.Users[u]
			delete(o.lastSeen, u)
		}
		for _, u := range f.Offline {
			o.online[u] = false
			delete(o.lastSeen, u)
			if at, ok := f.LastSeen[u]; ok {
				o.lastSeen[u] = at
			}
		}
	default:
		return fmt.Errorf("unexpected frame %s", frame)
	}
	maps.Copy(recs, f.Updated)
	return nil
}
