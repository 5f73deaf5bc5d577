package presence

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/internal/sortedset"
	"github.com/presenced/presenced/protocol"
)

// view is what this node knows of presence, built from the Engine's edges:
// who is online, each channel's members, and who of this node's clients
// asked to hear of which. It is the Node's Relay.
//
// Changes are logged per tick and go out at flush, netted: for each user the
// first edge of the tick says what it was before, the current state what it
// is now, and only a difference is sent. A client that subscribed during the
// tick has a base, the log position its snapshot reflects, and gets only the
// net of what followed.
type view struct {
	memberList, presenceLists int
	notify                    notifier  // OnPresence
	book                      seenBook  // last seen and hidden-at, on a ring of the Node's clock
	typing                    typists   // who types where, on a ring of the Node's clock
	notes                     noteClock // when notes run out, on a ring of the Node's clock

	mu       lockorder.Mutex[lockorder.View]
	users    map[string]userView
	others   map[string][]Client // the clients of a user after its first, for the few with more here
	channels map[string]*channelView
	dirty    []*channelView // channels with a non-empty log

	watchers map[string]map[Client]struct{} // uid -> clients watching it
	watching map[Client]*watchState
	userLog  []edge           // edges of watched users this tick
	offAt    map[string]int64 // when the watched users offline in userLog went, Unix ms
	rebased  []*watchState

	// records holds the records of the users online or a member here: see
	// records.go.
	records map[string]*userRecord

	forwarded atomic.Pointer[func(Message)] // Node.OnForward's handler

	// The peak sizes of the maps, so they give memory back after churn.
	usersPeak, othersPeak, channelsPeak, watchersPeak, watchingPeak, recordsPeak int
}

// userView is what the view keeps of a user while it is online or has a
// client on this node: one entry for both, and the first client inline, as
// most users have one client here. Only a user with a client has others.
type userView struct {
	c      Client // nil: none here
	online bool
	away   bool  // online and away
	member int32 // the channels of the view it is a member of, visible or not
}

// edge is one entry of a per-tick log: what kind says, for uid.
type edge struct {
	uid  string
	was  *protocol.Record // edgeRecord: the record before; nil: none
	on   bool
	kind edgeKind
}

// An edgeKind says what an edge changed. An invisible user's own
// connections see what it does (edgeMember, edgeHidden) and never its
// turning invisible; every other client sees edgeMember and edgeVisibility
// and never edgeHidden: see records.go.
type edgeKind uint8

const (
	edgeMember     edgeKind = iota // joined, or online: on
	edgeActivity                   // away: on
	edgeVisibility                 // turned visible (on) or invisible, a member still
	edgeHidden                     // an invisible user joined (on) or left
	edgeRecord                     // the record changed from was
)

type channelView struct {
	name    string
	members sortedset.Set       // the visible members
	hidden  map[string]struct{} // the invisible members; nil: none
	away    map[string]struct{} // the members who are away; nil: none
	subs    map[Client]sub
	log     []edge     // member edges this tick, kept only while there are subs
	typing  *typingSet // nil: nobody types and nobody was told anyone does
}

func (cv *channelView) isAway(uid string) bool {
	_, ok := cv.away[uid]
	return ok
}

func (cv *channelView) isHidden(uid string) bool {
	_, ok := cv.hidden[uid]
	return ok
}

// has reports whether uid is a member, visible or not.
func (cv *channelView) has(uid string) bool { return cv.members.Has(uid) || cv.isHidden(uid) }

func (cv *channelView) hide(uid string) {
	if cv.hidden == nil {
		cv.hidden = make(map[string]struct{})
	}
	cv.hidden[uid] = struct{}{}
}

func (cv *channelView) unhide(uid string) {
	if delete(cv.hidden, uid); len(cv.hidden) == 0 {
		cv.hidden = nil
	}
}

// setAway records whether member uid is away and reports whether that
// changed.
func (cv *channelView) setAway(uid string, away bool) bool {
	if away == cv.isAway(uid) {
		return false
	}
	if away {
		if cv.away == nil {
			cv.away = make(map[string]struct{})
		}
		cv.away[uid] = struct{}{}
	} else if delete(cv.away, uid); len(cv.away) == 0 {
		cv.away = nil
	}
	return true
}

// awayAmong returns those of uids (sorted) who are away.
func (cv *channelView) awayAmong(uids []string) []string {
	var out []string
	if len(cv.away) == 0 {
		return nil
	}
	for _, uid := range uids {
		if cv.isAway(uid) {
			out = append(out, uid)
		}
	}
	return out
}

// sub is one client's subscription to a channel: base is the log position
// its snapshot reflects, seen the count it was last told. A channel keeps
// one per subscriber, and neither number gets near 2^31.
type sub struct {
	base, seen int32
}

type watchState struct {
	c    Client
	uids []string // sorted
	base int
}

func (v *view) init(memberList, presenceLists int) {
	v.memberList, v.presenceLists = memberList, presenceLists
	v.notify.idle.L = &v.notify.mu
	v.users = make(map[string]userView)
	v.others = make(map[string][]Client)
	v.channels = make(map[string]*channelView)
	v.watchers = make(map[string]map[Client]struct{})
	v.watching = make(map[Client]*watchState)
	v.records = make(map[string]*userRecord)
}

// Receive takes the Engine's events: the one place the view hears of
// presence from outside.
func (v *view) Receive(e Event) {
	switch e.Kind {
	case EventUser:
		v.userChanged(e.UID, e.On, e.At)
	case EventActivity:
		if e.Channel != "" {
			v.memberActivity(e.Channel, e.UID, e.On)
		} else {
			v.activityChanged(e.UID, e.On)
		}
	case EventMember:
		v.memberChanged(e.Channel, e.UID, e.On)
	case EventRecord:
		v.recordChanged(e.UID, e.Record, e.At)
	case EventMembers:
		v.setMembers(e.Channel, e.Members, e.Away)
	case EventProduced:
		v.produced(e.Edge)
	case EventMessage:
		v.deliver(e.Message)
	}
}

// produced passes an edge this node made on to the embedder's callbacks,
// and records when a user went offline.
func (v *view) produced(e Edge) {
	if e.Kind == EdgeOffline {
		v.book.offline(e.UID, e.At)
	}
	v.notify.push(e)
}

// userChanged records an online or offline edge; offline ends being away.
func (v *view) userChanged(uid string, online bool, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	u := v.users[uid]
	// An offline edge, or the state of a user the Engine reports offline
	// as its node starts following it: a watching frame carries when it
	// went.
	if !online {
		v.book.offline(uid, at)
	}
	if u.online == online {
		return
	}
	if online {
		// Its record, if it has one, came first: a user that comes back
		// without one, invisible before, is not now (the record ran out),
		// and the channels that hid it show it, before its watchers hear.
		r := v.records[uid]
		if r == nil && u.member > 0 && v.hiddenLocked(uid) {
			v.turnLocked(uid, &userRecord{in: v.channelsOfLocked(uid)}, true, at)
		}
		v.book.online(uid, r != nil && r.rec.Mode == protocol.ModeInvisible)
	}
	wasAway := u.away
	u.online, u.away = online, false
	v.putUser(uid, u)
	if !v.hiddenLocked(uid) {
		v.logUserOnlineLocked(uid, online, wasAway, at)
	}
	if !online {
		v.forgetRecordLocked(uid)
	}
}

// logUserOnlineLocked logs, for uid's watchers, that it went online or
// offline (at at), or turned visible or invisible, which they see alike.
func (v *view) logUserOnlineLocked(uid string, online, wasAway bool, at time.Time) {
	if len(v.watchers[uid]) == 0 {
		return
	}
	if wasAway {
		v.userLog = append(v.userLog, edge{uid: uid, kind: edgeActivity})
	}
	v.userLog = append(v.userLog, edge{uid: uid, on: online})
	if !online {
		if v.offAt == nil {
			v.offAt = make(map[string]int64)
		}
		if at.IsZero() {
			at = time.Now()
		}
		v.offAt[uid] = at.UnixMilli()
	}
}

// activityChanged records an online user's away or active edge.
func (v *view) activityChanged(uid string, away bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	u := v.users[uid]
	if !u.online || u.away == away {
		return
	}
	u.away = away
	v.putUser(uid, u)
	if len(v.watchers[uid]) > 0 && !v.hiddenLocked(uid) {
		v.userLog = append(v.userLog, edge{uid: uid, on: away, kind: edgeActivity})
	}
}

// memberActivity records a member's away or active edge in channel.
func (v *view) memberActivity(channel, uid string, away bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.memberActivityLocked(channel, uid, away)
}

func (v *view) memberActivityLocked(channel, uid string, away bool) {
	cv := v.channels[channel]
	if cv == nil || !cv.has(uid) || !cv.setAway(uid, away) {
		return
	}
	v.logLocked(cv, edge{uid: uid, on: away, kind: edgeActivity})
}

// logLocked appends e to cv's log for the tick's diffs, if anyone here
// subscribes to cv.
func (v *view) logLocked(cv *channelView, e edge) {
	if len(cv.subs) == 0 {
		return
	}
	if len(cv.log) == 0 {
		v.dirty = append(v.dirty, cv)
	}
	cv.log = append(cv.log, e)
}

// memberChanged records a join or leave edge of channel.
func (v *view) memberChanged(channel, uid string, joined bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.memberChangedLocked(channel, uid, joined)
}

// setMembers replaces channel's members, and who of them is away, with a
// snapshot, recording the differences as edges.
func (v *view) setMembers(channel string, members, away []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := make(map[string]struct{}, len(members))
	for _, uid := range members {
		now[uid] = struct{}{}
	}
	isAway := make(map[string]struct{}, len(away))
	for _, uid := range away {
		isAway[uid] = struct{}{}
	}
	if cv := v.channels[channel]; cv != nil {
		was := cv.members.First(cv.members.Len())
		for uid := range cv.hidden {
			was = append(was, uid)
		}
		for _, uid := range was {
			if _, stays := now[uid]; !stays {
				v.memberChangedLocked(channel, uid, false)
			}
		}
	}
	for _, uid := range members {
		v.memberChangedLocked(channel, uid, true)
		_, a := isAway[uid]
		v.memberActivityLocked(channel, uid, a)
	}
}

func (v *view) memberChangedLocked(channel, uid string, joined bool) {
	cv := v.channels[channel]
	if cv == nil {
		if !joined {
			return
		}
		cv = &channelView{name: channel, subs: make(map[Client]sub)}
		v.channels[channel] = cv
	}
	kind := edgeMember
	switch {
	case joined && cv.has(uid):
		return
	case joined && v.hiddenLocked(uid):
		cv.hide(uid)
		kind = edgeHidden
	case joined:
		cv.members.Add(uid)
	case cv.isHidden(uid):
		cv.unhide(uid)
		kind = edgeHidden
	case !cv.members.Remove(uid):
		return
	}
	if !joined {
		// Logged, so that a diff that nets the leave out still compares
		// the record it has then with the one it came back with: its
		// changes meanwhile were not logged here.
		var was *protocol.Record
		if r := v.records[uid]; r != nil {
			rec := r.rec
			was = &rec
		}
		v.logLocked(cv, edge{uid: uid, kind: edgeRecord, was: was})
	}
	v.countMemberLocked(uid, channel, joined)
	if !joined {
		v.stopTypingLocked(cv, uid)
	}
	if !joined && cv.setAway(uid, false) {
		// Logged, so that a diff that nets the leave out (the user is back
		// within the tick) still sees the activity it had.
		v.logLocked(cv, edge{uid: uid, kind: edgeActivity})
	}
	v.logLocked(cv, edge{uid: uid, on: joined, kind: kind})
	v.dropIfUnused(cv)
}

func (v *view) dropIfUnused(cv *channelView) {
	if cv.members.Len() == 0 && len(cv.hidden) == 0 && len(cv.subs) == 0 && len(cv.log) == 0 && v.channels[cv.name] == cv {
		delete(v.channels, cv.name)
		v.channels = shrink.Map(v.channels, &v.channelsPeak)
	}
}

// deliver sends m's frame to the clients it is for, or closes them; a
// typing message marks its user typing, and a chat line ends that.
func (v *view) deliver(m Message) {
	if m.Kind == MessageForward {
		v.forward(m)
		return
	}
	v.mu.Lock()
	if m.Kind == MessageTyping {
		v.typingLocked(m.Channel, m.From)
		v.mu.Unlock()
		return
	}
	if m.Channel != "" {
		if cv := v.channels[m.Channel]; cv != nil {
			if m.Kind == MessageChat {
				v.stopTypingLocked(cv, m.From)
			}
			for c := range cv.subs {
				c.Send(m.Frame)
			}
		}
		v.mu.Unlock()
		return
	}
	if m.Kind != MessageDisconnect {
		if c := v.users[m.UID].c; c != nil {
			c.Send(m.Frame)
		}
		for _, c := range v.others[m.UID] {
			c.Send(m.Frame)
		}
		v.mu.Unlock()
		return
	}
	// Closing a client disconnects it from the Node, which calls the
	// Engine: a Relay never does that on the Engine's goroutine.
	var kick []Client
	if c := v.users[m.UID].c; c != nil {
		kick = append([]Client{c}, v.others[m.UID]...)
	}
	v.mu.Unlock()
	if len(kick) > 0 {
		go func() {
			for _, c := range kick {
				c.Close(protocol.CloseDisconnected, protocol.ReasonDisconnected)
			}
		}()
	}
}

// putUser stores what the view keeps of uid, or forgets uid if it is
// neither online nor has a client here.
func (v *view) putUser(uid string, u userView) {
	v.users = shrink.Put(v.users, uid, u, &v.usersPeak)
}

func (v *view) addClient(c Client, uid string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if u := v.users[uid]; u.c == nil {
		u.c = c
		v.putUser(uid, u)
	} else {
		v.others[uid] = append(v.others[uid], c)
	}
}

// removeClient forgets c: its subscriptions, its watch list and its place
// among its user's clients. It returns the users c watched.
func (v *view) removeClient(c Client, uid string, channels []string) (watched []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	u, more := v.users[uid], v.others[uid]
	if u.c == c {
		u.c = nil
		if len(more) > 0 {
			// Two statements: in one, Delete may run first and zero
			// more[0] before it is read.
			u.c = more[0]
			more = slices.Delete(more, 0, 1)
		}
		v.putUser(uid, u)
	} else {
		more = slices.DeleteFunc(more, func(x Client) bool { return x == c })
	}
	if len(more) > 0 {
		v.others[uid] = more
	} else if _, ok := v.others[uid]; ok {
		delete(v.others, uid)
		v.others = shrink.Map(v.others, &v.othersPeak)
	}
	for _, ch := range channels {
		if cv := v.channels[ch]; cv != nil {
			delete(cv.subs, c)
			v.dropIfUnused(cv)
		}
	}
	watched = v.unwatchLocked(c)
	if _, ok := v.watching[c]; ok {
		delete(v.watching, c)
		v.watching = shrink.Map(v.watching, &v.watchingPeak)
	}
	return watched
}

// subscribe (re)subscribes c, a connection of uid, to channel and sends it
// the snapshot, in one critical section with the log position it reflects.
// An invisible user's own snapshot counts and lists itself.
func (v *view) subscribe(c Client, uid, channel string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cv := v.channels[channel]
	if cv == nil {
		cv = &channelView{name: channel, subs: make(map[Client]sub)}
		v.channels[channel] = cv
	}
	count := countSeen(uid, cv.members.Len()+len(cv.hidden), maps.Keys(cv.hidden))
	members := cv.members.First(v.memberList)
	own := ""
	if cv.isHidden(uid) {
		own = uid
		members = withOwn(members, uid, v.memberList, cv.members.Len() > len(members))
	}
	cv.subs[c] = sub{base: int32(len(cv.log)), seen: int32(count)}
	j := protocol.Joined{Channel: channel, Count: count, Members: members, Away: cv.awayAmong(members), Users: v.usersLocked(members, own)}
	if v.hiddenLocked(uid) {
		j.Mode = protocol.ModeInvisible
	}
	c.Send(protocol.MustEncode(j))
	v.typingSnapshotLocked(c, cv)
}

func (v *view) unsubscribe(c Client, channel string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cv := v.channels[channel]; cv != nil {
		delete(cv.subs, c)
		v.dropIfUnused(cv)
	}
	c.Send(protocol.MustEncode(protocol.Left{Channel: channel}))
}

// watch replaces c's watch list (sorted, without duplicates), sends it who
// of them is online and returns the list it replaced.
func (v *view) watch(c Client, uids []string) (old []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old = v.unwatchLocked(c)
	ws := &watchState{c: c, uids: uids, base: len(v.userLog)}
	v.watching[c] = ws
	if ws.base > 0 {
		v.rebased = append(v.rebased, ws)
	}
	online := []string{}
	var away []string
	var lastSeen map[string]int64
	for _, uid := range uids {
		w := v.watchers[uid]
		if w == nil {
			w = make(map[Client]struct{})
			v.watchers[uid] = w
		}
		w[c] = struct{}{}
		if v.visibleLocked(uid) {
			online = append(online, uid)
			if v.users[uid].away {
				away = append(away, uid)
			}
		} else if at, ok := v.lastSeenLocked(uid); ok {
			if lastSeen == nil {
				lastSeen = make(map[string]int64)
			}
			lastSeen[uid] = at
		}
	}
	c.Send(protocol.MustEncode(protocol.Watching{Online: online, Away: away, Users: v.usersLocked(online, ""), LastSeen: lastSeen}))
	return old
}

// unwatchLocked empties c's watch list and returns what it held.
func (v *view) unwatchLocked(c Client) []string {
	ws := v.watching[c]
	if ws == nil {
		return nil
	}
	for _, uid := range ws.uids {
		if w := v.watchers[uid]; w != nil {
			delete(w, c)
			if len(w) == 0 {
				delete(v.watchers, uid)
				v.watchers = shrink.Map(v.watchers, &v.watchersPeak)
			}
		}
	}
	old := ws.uids
	ws.uids = nil
	return old
}
