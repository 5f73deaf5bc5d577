package cluster

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// Records reach a node on three paths: the user's topic (its changes, and
// the record in a watched user's snapshot), the topics of the channels the
// user is a member of (changes copied there by the nodes that hold the
// membership, and the record in a join edge and a channel's snapshot). One
// change may so arrive more than once, and, across topics, out of order:
// the router keeps the newest version it has relayed of each user's record
// and relays only newer ones. Every Relay call of one user's record is made
// on the queue of the user's shard, in the order decided, so two versions
// never overtake each other on their way to the Relay; one that a channel's
// call depends on (a join, a snapshot) is delivered before it.

// knownRecord is a user's record as this node last heard of it.
type knownRecord struct {
	v    int64  // version: the user's shard's T:seq at the change, or at the snapshot that read it
	hid  int64  // when it turned invisible (ms), while it is
	at   int64  // when it changed (ms); 0 if it came in a snapshot
	raw  string // the record's JSON, as Redis wrote it
	rec  protocol.Record
	seen time.Time // when it was last relayed or read, to sweep it
	// gone says the user was offline when last heard of: when the Node's
	// last seen of it runs out (forget), so does the record in Redis.
	gone bool
}

// hiddenAt is the time to relay with a record that is not news of a
// change: when the user turned invisible, if it is, else zero.
func (kr *knownRecord) hiddenAt() time.Time {
	if kr.rec.Mode == protocol.ModeInvisible && kr.hid > 0 {
		return time.UnixMilli(kr.hid)
	}
	return time.Time{}
}

// changedAt is the time to relay with a changed record: the change's, but
// for an invisible user the time it turned invisible, which a view that had
// forgotten the record takes as its last seen.
func (kr *knownRecord) changedAt() time.Time {
	if at := kr.hiddenAt(); !at.IsZero() {
		return at
	}
	if kr.at > 0 {
		return time.UnixMilli(kr.at)
	}
	return time.Time{}
}

// learn takes uid's record at version v and returns the newest known one,
// and whether that is this one, newer than what was known. An empty record
// from a snapshot is kept only to replace one known before. Called with r.mu
// held.
func (r *router) learn(uid string, v, hid, at int64, raw string, snapshot bool) (*knownRecord, bool) {
	kr := r.known[uid]
	if kr != nil && kr.v >= v {
		kr.seen = time.Now()
		return kr, false
	}
	if raw == "" {
		raw = "{}"
	}
	var rec protocol.Record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		r.log.Warn("cluster: a record on a topic is not ours", "uid", uid, "err", err)
		return kr, false
	}
	if kr == nil && snapshot && rec.IsZero() {
		return nil, false
	}
	kr = &knownRecord{v: v, hid: hid, at: at, raw: raw, rec: rec, seen: time.Now()}
	r.known[uid] = kr
	return kr, true
}

// knownRecord returns uid's record as this node knows it, for the writer
// to copy to a channel uid joins.
func (r *router) knownRecord(uid string) (knownRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kr := r.known[uid]
	if kr == nil {
		return knownRecord{}, false
	}
	return *kr, true
}

// postRecord queues a Relay call of uid's record on the queue of uid's
// shard and adds that shard to touched, which the caller delivers before
// the calls that need the record. Called with r.mu held.
func (r *router) postRecord(uid string, rec protocol.Record, at time.Time, touched *[]int) {
	s := r.shard(uid)
	r.post(s, func(rl presence.Relay) {
		rl.Receive(presence.Event{Kind: presence.EventRecord, UID: uid, Record: rec, At: at})
	})
	for _, t := range *touched {
		if t == s {
			return
		}
	}
	*touched = append(*touched, s)
}

// decideRecord relays a change of a record that arrived on ts, if it is
// news. One on the user's own topic is copied on to the channels this node
// holds the user in. Called with r.mu held.
func (r *router) decideRecord(ts *topicState, ev wireEvent, touched *[]int) {
	uid, v := ts.t.UID, ev.S
	if ts.t.Channel != "" {
		uid, v = ev.UID, ev.RV
	}
	r.relayRecord(uid, v, ev.H, ev.At, ev.R, ts.t.Channel == "", touched)
}

// relayRecord relays uid's record at version v if it is news, and with
// own (it came from the user's own topic, or this node wrote it) copies it
// on to the channels this node holds the user in. Called with r.mu held.
func (r *router) relayRecord(uid string, v, hid, at int64, raw string, own bool, touched *[]int) {
	kr, news := r.learn(uid, v, hid, at, raw, false)
	if !news {
		return
	}
	if own {
		r.w.queueRepublish(uid, kr)
	}
	r.m.relayed.WithLabelValues("record").Inc()
	r.postRecord(uid, kr.rec, kr.changedAt(), touched)
}

// wroteRecord takes a record this node's change wrote, as its own topic
// will bring it back: at once, so that what this node writes next (a
// membership copies the record) and shows (a join) has it.
func (r *router) wroteRecord(uid string, v, hid, at int64, raw string) {
	var touched []int
	r.mu.Lock()
	r.relayRecord(uid, v, hid, at, raw, true, &touched)
	r.mu.Unlock()
	for _, s := range touched {
		r.deliver(s)
	}
}

// postKnown relays uid's known record, if it has one, ahead of a call that
// shows the user (a join, a snapshot): the Relay may have forgotten it.
// Called with r.mu held.
func (r *router) postKnown(uid string, touched *[]int) {
	if kr := r.known[uid]; kr != nil && !kr.rec.IsZero() {
		r.postRecord(uid, kr.rec, kr.hiddenAt(), touched)
	}
}

// wentOffline notes whether uid is offline, for its known record's end.
// Called with r.mu held.
func (r *router) wentOffline(uid string, gone bool) {
	if kr := r.known[uid]; kr != nil {
		kr.gone = gone
	}
}

// forget drops uid's known record if uid is offline: the Node's last seen
// of it ran out, and the record in Redis with it.
func (r *router) forget(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if kr := r.known[uid]; kr != nil && kr.gone {
		delete(r.known, uid)
	}
}

// sweepKnownLocked forgets the records of users whose topic this node does
// not follow and that it has not heard of for a timeout: a late copy of an
// older version can no longer be on its way. Called with r.mu held.
func (r *router) sweepKnownLocked(now time.Time) {
	cutoff := now.Add(-r.cfg.Timeout)
	for uid, kr := range r.known {
		if kr.seen.After(cutoff) {
			continue
		}
		if _, followed := r.topics[r.topicName(presence.Topic{UID: uid})]; followed {
			continue
		}
		delete(r.known, uid)
	}
}

// deliverTouched delivers the shards' queues of the records decided, then
// shard's: what shard's calls show has its record in the Relay first.
// Called without r.mu.
func (r *router) deliverTouched(touched []int, shard int) {
	for _, s := range touched {
		if s != shard {
			r.deliver(s)
		}
	}
	r.deliver(shard)
}

// learnCopies takes the copies of members' records a channel's snapshot
// read: uid, "version hidden-at record", ... Called with r.mu held.
func (r *router) learnCopies(copies []string) {
	for i := 0; i+1 < len(copies); i += 2 {
		v, hid, raw, ok := parseCopy(copies[i+1])
		if ok {
			r.learn(copies[i], v, hid, 0, raw, true)
		}
	}
}

// parseCopy reads a T:mr value: "version hidden-at record".
func parseCopy(s string) (v, hid int64, raw string, ok bool) {
	a, rest, ok1 := strings.Cut(s, " ")
	b, raw, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return 0, 0, "", false
	}
	v, err1 := strconv.ParseInt(a, 10, 64)
	hid, err2 := strconv.ParseInt(b, 10, 64)
	return v, hid, raw, err1 == nil && err2 == nil
}
