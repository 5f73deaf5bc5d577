package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/presenced/presenced/protocol"
)

// visModel is the truth of a visibility history, and the Node it runs on.
type visModel struct {
	n      *Node
	conns  map[int]*visConn // the live connections, by the op that opened them
	users  map[string]*visUser
	leases map[string]*visLease
	tick   int
	quiet  bool // a tick whose frames are taken in but not checked
}

type visConn struct {
	c      *client
	uid    string
	joined map[string]bool
	watch  []string
	obs    visObs
}

type visLease struct {
	chans map[string]bool
	end   int // the tick it has run out by
}

// visUser is what the model knows of a user: its record, and the windows
// (Unix ms) in which it last went offline and turned invisible.
type visUser struct {
	mode           string
	note           string
	seen           bool
	seenLo, seenHi int64
	hidLo, hidHi   int64
}

func (m *visModel) liveConns(uid string) int {
	n := 0
	for _, c := range m.conns {
		if c.uid == uid {
			n++
		}
	}
	if m.leases[uid] != nil {
		n++
	}
	return n
}

func (m *visModel) visible(uid string) bool {
	return m.liveConns(uid) > 0 && m.users[uid].mode != protocol.ModeInvisible
}

func (m *visModel) member(uid, ch string) bool {
	for _, c := range m.conns {
		if c.uid == uid && c.joined[ch] {
			return true
		}
	}
	l := m.leases[uid]
	return l != nil && l.chans[ch]
}

// record is uid's whole record; others see it without invisible.
func (m *visModel) record(uid string, whole bool) protocol.Record {
	u := m.users[uid]
	r := protocol.Record{Mode: u.mode}
	if u.note != "" {
		r.Note = &protocol.Note{Text: u.note}
	}
	if !whole && r.Mode == protocol.ModeInvisible {
		r.Mode = ""
	}
	return r
}

// lastSeen is the window in which others saw uid go (ok false: never).
func (m *visModel) lastSeen(uid string) (lo, hi int64, ok bool) {
	u := m.users[uid]
	if u.mode == protocol.ModeInvisible {
		return u.hidLo, u.hidHi, true
	}
	return u.seenLo, u.seenHi, u.seen
}

// visibleMembers lists ch's members others see, sorted.
func (m *visModel) visibleMembers(ch string) []string {
	out := []string{}
	for uid := range m.users {
		if m.visible(uid) && m.member(uid, ch) {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out
}

// do runs op, then notes who went offline or turned invisible during it.
func (m *visModel) do(op visOp) error {
	online := map[string]bool{}
	for uid := range m.users {
		online[uid] = m.liveConns(uid) > 0
	}
	wasMode := map[string]string{}
	for uid, u := range m.users {
		wasMode[uid] = u.mode
	}
	lo := time.Now().UnixMilli()
	err := m.apply(op)
	if err == errVisSkip {
		err = nil
	}
	hi := time.Now().UnixMilli()
	for uid, u := range m.users {
		if online[uid] && m.liveConns(uid) == 0 {
			u.seen, u.seenLo, u.seenHi = true, lo, hi
		}
		if wasMode[uid] != protocol.ModeInvisible && u.mode == protocol.ModeInvisible {
			u.hidLo, u.hidHi = lo, hi
		}
	}
	return err
}

func (m *visModel) apply(op visOp) error {
	ctx := context.Background()
	c := m.conns[op.conn]
	switch op.kind {
	case visConnect, visReconnect:
		uid, chans, watch := fmt.Sprintf("u%d", op.uid), []string{visChannels[op.ch]}, []string(nil)
		if op.kind == visReconnect {
			old := m.conns[op.uid]
			if old == nil {
				return errVisSkip
			}
			m.n.Disconnect(old.c)
			delete(m.conns, op.uid)
			uid, chans, watch = old.uid, slices.Sorted(maps.Keys(old.joined)), old.watch
		}
		nc := &visConn{c: &client{name: uid}, uid: uid, joined: map[string]bool{}}
		if err := m.n.Connect(ctx, nc.c, uid, chans); err != nil {
			return err
		}
		for _, ch := range chans {
			nc.joined[ch] = true
		}
		m.conns[op.conn] = nc
		if watch != nil {
			nc.watch = watch
			return m.n.Watch(ctx, nc.c, watch)
		}
		return nil
	case visTick:
		return m.step()
	case visLapse:
		for range visSlots {
			if err := m.step(); err != nil {
				return err
			}
		}
		return nil
	case visHeartbeat:
		uid := fmt.Sprintf("u%d", op.uid)
		l := &visLease{chans: map[string]bool{}, end: m.tick + visSlots}
		var chans []string
		for i, ch := range visChannels {
			if op.chans&(1<<i) != 0 {
				l.chans[ch] = true
				chans = append(chans, ch)
			}
		}
		m.leases[uid] = l
		return m.n.Heartbeat(uid, chans)
	}
	if c == nil {
		return errVisSkip
	}
	ch := visChannels[op.ch]
	switch op.kind {
	case visClose:
		m.n.Disconnect(c.c)
		delete(m.conns, op.conn)
	case visJoin:
		if c.joined[ch] {
			return errVisSkip
		}
		c.joined[ch] = true
		return m.n.Join(ctx, c.c, ch)
	case visLeave:
		if !c.joined[ch] {
			return errVisSkip
		}
		delete(c.joined, ch)
		return m.n.Leave(c.c, ch)
	case visMode:
		m.users[c.uid].mode = op.mode
		if op.mode == protocol.ModeOnline {
			m.users[c.uid].mode = ""
		}
		return m.n.Set(c.c, protocol.Set{Mode: op.mode})
	case visNote:
		set := protocol.Set{NoteSet: true}
		if op.text != "" {
			set.Note = &protocol.Note{Text: op.text}
		}
		m.users[c.uid].note = op.text
		return m.n.Set(c.c, set)
	case visFlash:
		until := time.Now().Add(15 * time.Millisecond).UnixMilli()
		if err := m.n.Set(c.c, protocol.Set{NoteSet: true, Note: &protocol.Note{Text: "soon", Until: until}}); err != nil {
			return err
		}
		for time.Now().UnixMilli() <= until {
			time.Sleep(time.Millisecond) // the wall clock must pass until: nothing else moves it
		}
		m.users[c.uid].note = ""
		m.quiet = true // the first step may clear it or not yet
		err := m.step()
		m.quiet = false
		if err != nil {
			return err
		}
		return m.step()
	case visWatch:
		c.watch = nil
		for _, u := range op.watch {
			if uid := fmt.Sprintf("u%d", u); uid != c.uid {
				c.watch = append(c.watch, uid)
			}
		}
		if c.watch == nil {
			c.watch = []string{}
		}
		return m.n.Watch(ctx, c.c, c.watch)
	}
	return nil
}

// step keeps every connection alive, steps the clock, ends the leases
// that ran out, and checks what each connection now believes.
func (m *visModel) step() error {
	for _, c := range m.conns {
		m.n.Touch(c.c)
	}
	lo := time.Now().UnixMilli()
	m.n.Step()
	hi := time.Now().UnixMilli()
	m.tick++
	for uid, l := range m.leases {
		if m.tick >= l.end {
			delete(m.leases, uid)
			if u := m.users[uid]; m.liveConns(uid) == 0 {
				u.seen, u.seenLo, u.seenHi = true, lo, hi
			}
		}
	}
	for id, c := range m.conns {
		for _, f := range c.c.takeRaw() {
			if err := c.obs.take(f, c.watch); err != nil {
				return fmt.Errorf("#%d (%s): %w", id, c.uid, err)
			}
		}
		if m.quiet {
			continue
		}
		if err := m.checkConn(c); err != nil {
			return fmt.Errorf("#%d (%s) after tick %d: %w", id, c.uid, m.tick, err)
		}
	}
	return nil
}

// checkConn compares what c believes with what its user may know.
func (m *visModel) checkConn(c *visConn) error {
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
func checkSeen(m *visModel, uid string, at int64, has bool) error {
	lo, hi, ok := m.lastSeen(uid)
	switch {
	case has != ok:
		return fmt.Errorf("last seen of %s shown %v (%d), want shown %v", uid, has, at, ok)
	case ok && (at < lo || at > hi):
		return fmt.Errorf("last seen of %s %d, want in [%d, %d] (%+d ms)", uid, at, lo, hi, at-hi)
	}
	return nil
}

// checkKeyless compares the keyless answers with the model.
func (m *visModel) checkKeyless() error {
	ctx := context.Background()
	var online []string
	for uid := range m.users {
		st, err := m.n.VisibleStatus(ctx, uid)
		if err != nil {
			return err
		}
		vis := m.visible(uid)
		if vis {
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
	count, users, err := m.n.VisibleUsers(ctx, 100)
	if err != nil {
		return err
	}
	if count != len(online) || !slices.Equal(orEmpty(users), orEmpty(online)) {
		return fmt.Errorf("users: %d %v, want %d %v", count, users, len(online), online)
	}
	for _, ch := range visChannels {
		count, members, _, err := m.n.VisibleMembers(ctx, ch, "", 100)
		if err != nil {
			return err
		}
		if want := m.visibleMembers(ch); count != len(want) || !slices.Equal(orEmpty(members), want) {
			return fmt.Errorf("members of %s: %d %v, want %d %v", ch, count, members, len(want), want)
		}
	}
	return nil
}

func recString(r protocol.Record) string {
	b, _ := json.Marshal(r)
	return string(b)
}

// visObs is what one connection believes, from its frames alone. It keeps
// records by where it heard them (a channel, or "" for its watch list):
// each channel's diffs net a record's changes against what that channel's
// frames said, not against what another channel's snapshot said.
type visObs struct {
	chans    map[string]map[string]bool
	count    map[string]int
	recs     map[string]map[string]protocol.Record
	online   map[string]bool // watched users
	lastSeen map[string]int64
}

// take applies one frame; watch is the connection's watch list.
func (o *visObs) take(frame string, watch []string) error {
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
			o.online[u] = true
			recs[u] = f.Users[u]
		}
		maps.Copy(o.lastSeen, f.LastSeen)
	case "status":
		for _, u := range f.Online {
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
