package presence

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/protocol"
)

// A user's record: what it says of itself beside presence. Info comes from
// its connections (the newest that brought one wins), mode and note from
// its set frames; the Engine keeps the record while the user is online and
// for Config.LastSeenTTL after, and every node's view shows it to the
// clients that see the user (see view.go for invisible users).

// An InfoClient is a Client that brings its user's info, such as a token's
// info claim (a JSON object, checked with protocol.CheckInfo): the Node asks
// it once, at Connect.
type InfoClient interface {
	Client
	Info() json.RawMessage
}

// connInfo is one connection's info, in the order the user's connections
// brought theirs.
type connInfo struct {
	c    Client
	info json.RawMessage
}

// addInfoLocked notes c's info as its user's newest and queues it for the
// Engine. Few users' connections bring info: the others cost nothing here.
func (n *Node) addInfoLocked(c Client, uid string, info json.RawMessage) {
	list := slices.DeleteFunc(n.infos[uid], func(x connInfo) bool { return x.c == c })
	n.infos[uid] = append(list, connInfo{c, info})
	n.queueLocked(Change{Kind: ChangeInfo, UID: uid, Info: info})
}

// dropInfoLocked forgets c's info. When c's was its user's info and another
// live connection brought one, that one's is the user's now; when none did,
// the record keeps c's, so a user who went offline keeps its name.
func (n *Node) dropInfoLocked(c Client, uid string) {
	list := n.infos[uid]
	i := slices.IndexFunc(list, func(x connInfo) bool { return x.c == c })
	if i < 0 {
		return
	}
	newest := i == len(list)-1
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(n.infos, uid)
		n.infos = shrink.Map(n.infos, &n.infosPeak)
		return
	}
	n.infos[uid] = list
	if newest {
		n.queueLocked(Change{Kind: ChangeInfo, UID: uid, Info: list[len(list)-1].info})
	}
}

// SetInfo replaces the info c brought (after a refresh with a new token):
// it becomes its user's info, as the newest. info must be a JSON object
// checked with protocol.CheckInfo; nil leaves the info as it is.
func (n *Node) SetInfo(c Client, info json.RawMessage) error {
	if info == nil {
		return nil
	}
	n.mu.Lock()
	cs := n.conns[c]
	if cs == nil {
		n.mu.Unlock()
		return ErrUnknownClient
	}
	n.addInfoLocked(c, cs.uid, info)
	n.mu.Unlock()
	n.sendOps()
	return nil
}

// Set applies a set frame of c's user to its record, on every node: its
// mode and its note, whole or not at all, if protocol.Set.Check finds
// nothing wrong with it. It makes c active.
func (n *Node) Set(c Client, set protocol.Set) error {
	if err := set.Check(time.Now()); err != nil {
		return err
	}
	n.mu.Lock()
	cs := n.conns[c]
	if cs == nil {
		n.mu.Unlock()
		return ErrUnknownClient
	}
	n.activeLocked(c, cs)
	n.queueLocked(Change{Kind: ChangeSet, UID: cs.uid, Set: set})
	n.mu.Unlock()
	n.sendOps()
	return nil
}

// Records returns, from the Engine, the records of those of uids that have
// one, as they are: invisible users included.
func (n *Node) Records(ctx context.Context, uids []string) (map[string]protocol.Record, error) {
	recs, err := n.engine.Records(ctx, uids)
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	for uid, r := range recs {
		// A note whose until passed is gone, whether or not a clock
		// cleared it yet.
		if r.Note != nil && r.Note.Until != 0 && r.Note.Until <= now {
			r.Note = nil
			recs[uid] = r
		}
	}
	return recs, nil
}

// VisibleStatus is Status as a client that is not uid sees it (See): an
// invisible user is offline, last seen when it turned invisible, and a
// user seen offline shows only its info.
func (n *Node) VisibleStatus(ctx context.Context, uid string) (UserStatus, error) {
	st, err := n.Status(ctx, uid)
	if err != nil {
		return UserStatus{}, err
	}
	return See("", uid, st), nil
}

// VisibleUsers is Users as a client sees them: without invisible users.
func (n *Node) VisibleUsers(ctx context.Context, limit int) (int, []string, error) {
	hidden, err := n.engine.Hidden(ctx, "")
	if err != nil {
		return 0, nil, err
	}
	count, users, err := n.engine.Users(ctx, limit+len(hidden))
	if err != nil {
		return 0, nil, err
	}
	users = without(users, hidden)
	return countSeen("", count, slices.Values(hidden)), users[:min(limit, len(users))], nil
}

// VisibleMembers is Members as a client sees them: without invisible
// members, in the count and in the page.
func (n *Node) VisibleMembers(ctx context.Context, channel, after string, limit int) (count int, members []string, next string, err error) {
	if err := checkPage(channel, after, limit); err != nil {
		return 0, nil, "", err
	}
	hidden, err := n.engine.Hidden(ctx, channel)
	if err != nil {
		return 0, nil, "", err
	}
	count, members, err = n.engine.Members(ctx, channel, after, limit+len(hidden)+1)
	if err != nil {
		return 0, nil, "", err
	}
	members, next = cutPage(without(members, hidden), limit)
	return countSeen("", count, slices.Values(hidden)), members, next, nil
}

// without returns the sorted list uids without those in drop (sorted).
func without(uids, drop []string) []string {
	if len(drop) == 0 {
		return uids
	}
	return slices.DeleteFunc(uids, func(uid string) bool {
		_, found := slices.BinarySearch(drop, uid)
		return found
	})
}

// RecordOf returns uid's whole record (invisible included) as this node's
// view has it: for one of uid's own connections, such as its welcome once
// Connect returned. The zero Record if the view has none.
func (n *Node) RecordOf(uid string) protocol.Record {
	n.v.mu.Lock()
	defer n.v.mu.Unlock()
	if r := n.v.records[uid]; r != nil {
		return r.rec
	}
	return protocol.Record{}
}
