package presence

import (
	"context"
	"time"

	"github.com/presenced/presenced/internal/lockorder"
	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/internal/sortedset"
	"github.com/presenced/presenced/protocol"
)

// NewMemoryEngine returns an Engine that keeps presence in this process
// only: the default, and the right choice for one node. It delivers every
// edge and message to the Relay at once, on the caller's goroutine, so what
// a client did is visible to the next tick.
func NewMemoryEngine() Engine {
	e, _ := NewMemoryEngineWith(LogConfig{}) // the zero LogConfig is valid
	return e
}

// NewMemoryEngineWith is NewMemoryEngine with its log of edges (EdgeLog)
// bounded by log; it fails only on an invalid log.
func NewMemoryEngineWith(log LogConfig) (Engine, error) {
	log, err := log.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &memoryEngine{
		multi:    make(map[string]int),
		away:     make(map[string]struct{}),
		channels: make(map[string]*sortedset.Set),
		awayIn:   make(map[membership]struct{}),
		records:  make(map[string]protocol.Record),
		log:      newMemLog(log),
	}, nil
}

type memoryEngine struct {
	relay Relay // set once by Attach, before any other call

	// mu guards the state below. It is never held while calling the Relay:
	// the Node applies one change at a time, so edges reach the Relay in
	// the order they happened without it.
	mu       lockorder.Mutex[lockorder.Store]
	online   sortedset.Set  // the users online, in order for listings
	multi    map[string]int // uid -> connections, for the users online with more than one
	away     map[string]struct{}
	channels map[string]*sortedset.Set
	awayIn   map[membership]struct{}    // the memberships of away users
	records  map[string]protocol.Record // the users that have a record
	hidden   sortedset.Set              // the invisible users, online or not
	// log numbers every edge in the order made, under mu, so its order is
	// the order the Relay hears them in.
	log *memLog

	multiPeak, awayPeak, channelsPeak, awayInPeak, recordsPeak int
}

type membership struct{ channel, uid string }

func (e *memoryEngine) Attach(r Relay) { e.relay = r }

// Run has nothing to do: everything happens on the callers' goroutines.
func (e *memoryEngine) Run(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// Apply makes c's edges at once, on the caller's goroutine.
func (e *memoryEngine) Apply(c Change) {
	switch c.Kind {
	case ChangeUser:
		e.setUser(c.UID, c.N, c.Away)
	case ChangeMember:
		e.setMember(c.Channel, c.UID, c.N, c.Away == 1)
	case ChangeInfo:
		e.change(c.UID, false, func(r *protocol.Record) { r.Info = c.Info })
	case ChangeSet:
		e.change(c.UID, true, func(r *protocol.Record) { applySet(r, c.Set) })
	case ChangeExpireNote:
		e.change(c.UID, true, func(r *protocol.Record) {
			if r.Note != nil && r.Note.Until == c.Until && c.Until <= time.Now().UnixMilli() {
				r.Note = nil
			}
		})
	case ChangeForget:
		e.forgetRecord(c.UID)
	}
}

func (e *memoryEngine) setUser(uid string, n, away int) {
	e.mu.Lock()
	var was bool
	if n > 0 {
		was = !e.online.Add(uid)
	} else {
		was = e.online.Remove(uid)
	}
	if n > 1 {
		e.multi[uid] = n
	} else if _, ok := e.multi[uid]; ok {
		delete(e.multi, uid)
		e.multi = shrink.Map(e.multi, &e.multiPeak)
	}
	_, wasAway := e.away[uid]
	isAway := n > 0 && away >= n
	if isAway && !wasAway {
		e.away[uid] = struct{}{}
	} else if !isAway && wasAway {
		delete(e.away, uid)
		e.away = shrink.Map(e.away, &e.awayPeak)
	}
	rec, hasRec := e.records[uid]
	hasRec = hasRec && n > 0 && !was
	now := time.Now()
	flipped, turned := was != (n > 0), n > 0 && isAway != (was && wasAway)
	var flip, turn Edge
	if flipped {
		kind := EdgeOffline
		if n > 0 {
			kind = EdgeOnline
		}
		flip = e.log.add(Edge{Kind: kind, UID: uid, At: now})
	}
	if turned {
		kind := EdgeActive
		if isAway {
			kind = EdgeAway
		}
		turn = e.log.add(Edge{Kind: kind, UID: uid, At: now})
	}
	e.mu.Unlock()
	if hasRec {
		// As it stands: the Node's book knows since when it is invisible.
		e.relay.Receive(Event{Kind: EventRecord, UID: uid, Record: rec})
	}
	if flipped {
		e.relay.Receive(Event{Kind: EventUser, UID: uid, On: n > 0, At: now})
		e.relay.Receive(Event{Kind: EventProduced, Edge: flip})
	}
	if turned {
		e.relay.Receive(Event{Kind: EventActivity, UID: uid, On: isAway})
		e.relay.Receive(Event{Kind: EventProduced, Edge: turn})
	}
}

func (e *memoryEngine) setMember(channel, uid string, n int, away bool) {
	e.mu.Lock()
	members := e.channels[channel]
	var changed bool
	switch {
	case n > 0:
		if members == nil {
			members = new(sortedset.Set)
			e.channels[channel] = members
		}
		changed = members.Add(uid)
	case members != nil:
		changed = members.Remove(uid)
		if members.Len() == 0 {
			delete(e.channels, channel)
			e.channels = shrink.Map(e.channels, &e.channelsPeak)
		}
	}
	key := membership{channel, uid}
	_, wasAway := e.awayIn[key]
	isAway := n > 0 && away
	if isAway && !wasAway {
		e.awayIn[key] = struct{}{}
	} else if !isAway && wasAway {
		delete(e.awayIn, key)
		e.awayIn = shrink.Map(e.awayIn, &e.awayInPeak)
	}
	var edge Edge
	if changed {
		kind := EdgeLeave
		if n > 0 {
			kind = EdgeJoin
		}
		edge = e.log.add(Edge{Kind: kind, UID: uid, Channel: channel, At: time.Now()})
	}
	e.mu.Unlock()
	if changed {
		e.relay.Receive(Event{Kind: EventMember, Channel: channel, UID: uid, On: n > 0})
		e.relay.Receive(Event{Kind: EventProduced, Edge: edge})
	}
	// A leave takes the member's activity with it.
	if n > 0 && isAway != (wasAway && !changed) {
		e.relay.Receive(Event{Kind: EventActivity, Channel: channel, UID: uid, On: isAway})
	}
}

// Follow and Unfollow have nothing to do: this engine delivers everything.
func (e *memoryEngine) Follow(ctx context.Context, topics []Topic) error { return nil }
func (e *memoryEngine) Unfollow(topics []Topic)                          {}

// Status keeps no last seen or hidden-at: the Node does, for every edge and
// record of this engine.
func (e *memoryEngine) Status(ctx context.Context, uid string) (UserStatus, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := UserStatus{Record: e.records[uid]}
	_, st.Away = e.away[uid]
	if n, ok := e.multi[uid]; ok {
		st.Conns = n
	} else if e.online.Has(uid) {
		st.Conns = 1
	}
	return st, nil
}

// Users lists from an ordered index: O(limit), whatever the count.
func (e *memoryEngine) Users(ctx context.Context, limit int) (int, []string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.online.Len(), e.online.First(limit), nil
}

func (e *memoryEngine) Members(ctx context.Context, channel, after string, limit int) (int, []string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	members := e.channels[channel]
	if members == nil {
		return 0, []string{}, nil
	}
	return members.Len(), members.After(after, limit), nil
}

// Publish hands m to the Relay on the caller's goroutine.
func (e *memoryEngine) Publish(ctx context.Context, m Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.relay.Receive(Event{Kind: EventMessage, Message: m})
	return nil
}

// applySet applies set to r, as every engine does.
func applySet(r *protocol.Record, set protocol.Set) {
	switch set.Mode {
	case "":
	case protocol.ModeOnline:
		r.Mode = ""
	default:
		r.Mode = set.Mode
	}
	if set.NoteSet {
		r.Note = set.Note
	}
}

// change applies f to uid's record and, if that changed it, tells the
// Relay, and produces its edge too if edge (a set or an expiry, not an info).
func (e *memoryEngine) change(uid string, edge bool, f func(*protocol.Record)) {
	now := time.Now()
	e.mu.Lock()
	old := e.records[uid]
	rec := old
	f(&rec)
	if rec.Equal(old) {
		e.mu.Unlock()
		return
	}
	e.records[uid] = rec
	if rec.Mode == protocol.ModeInvisible {
		e.hidden.Add(uid)
	} else {
		e.hidden.Remove(uid)
	}
	if rec.IsZero() {
		delete(e.records, uid)
		e.records = shrink.Map(e.records, &e.recordsPeak)
	}
	var update Edge
	if edge {
		update = e.log.add(Edge{Kind: EdgeUpdate, UID: uid, Record: rec, At: now})
	}
	e.mu.Unlock()
	e.relay.Receive(Event{Kind: EventRecord, UID: uid, Record: rec, At: now})
	if edge {
		e.relay.Receive(Event{Kind: EventProduced, Edge: update})
	}
}

// forgetRecord drops uid's record if uid is offline: the Node asks for it
// (ChangeForget) once its last seen ran out. The Relay hears of it as an empty record,
// with no edge: a view that kept an invisible user's record lets it go.
func (e *memoryEngine) forgetRecord(uid string) {
	e.mu.Lock()
	_, ok := e.records[uid]
	if ok && !e.online.Has(uid) {
		delete(e.records, uid)
		e.records = shrink.Map(e.records, &e.recordsPeak)
		e.hidden.Remove(uid)
	}
	e.mu.Unlock()
	if ok {
		e.relay.Receive(Event{Kind: EventRecord, UID: uid, Record: protocol.Record{}})
	}
}

func (e *memoryEngine) Records(ctx context.Context, uids []string) (map[string]protocol.Record, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]protocol.Record)
	for _, uid := range uids {
		if r, ok := e.records[uid]; ok {
			out[uid] = r
		}
	}
	return out, nil
}

// Hidden costs O(invisible users), whatever the channel's size.
func (e *memoryEngine) Hidden(ctx context.Context, channel string) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	in := e.online.Has
	if channel != "" {
		members := e.channels[channel]
		if members == nil {
			return nil, nil
		}
		in = members.Has
	}
	var out []string
	for _, uid := range e.hidden.First(e.hidden.Len()) {
		if in(uid) {
			out = append(out, uid)
		}
	}
	return out, nil
}
