package presence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/presenced/presenced/protocol"
)

// Paging through a channel's members: from the Engine, for a server's API,
// and from the view, for a connection that joined the channel, where a page
// must fit the diffs the connection is sent.

// Members returns a page of channel's members on every node: how many
// there are, up to limit of their IDs greater than after ("": from the
// first) in ascending order, and next, the last ID of the page when more
// members follow it (the after of the next page), or "" on the last page.
// after must be "" or a valid user ID, limit at least 1.
func (n *Node) Members(ctx context.Context, channel, after string, limit int) (count int, members []string, next string, err error) {
	if err := checkPage(channel, after, limit); err != nil {
		return 0, nil, "", err
	}
	// One more than asked says whether more follow.
	count, members, err = n.engine.Members(ctx, channel, after, min(limit, math.MaxInt32)+1)
	if err != nil {
		return 0, nil, "", err
	}
	members, next = cutPage(members, limit)
	return count, members, next, nil
}

// SendMembers sends c a members frame: a page of channel's members as
// Members describes it, but from this node's view of the channel, as
// c's snapshot and the diffs sent to c so far left it. So the channel's
// next diff to c applies to the page as it does to the snapshot, and a
// client that pages through while applying its diffs ends with the exact
// member set (while the channel's diffs carry lists). The frame is queued in
// order with c's diffs. c must have joined channel, else ErrNotJoined.
func (n *Node) SendMembers(c Client, channel, after string, limit int) error {
	if err := checkPage(channel, after, limit); err != nil {
		return err
	}
	n.mu.Lock()
	cs := n.conns[c]
	n.mu.Unlock()
	if cs == nil || !n.v.page(c, cs.uid, channel, after, limit) {
		return ErrNotJoined
	}
	return nil
}

func checkPage(channel, after string, limit int) error {
	switch {
	case !protocol.ValidChannel(channel):
		return protocol.ErrInvalidChannel
	case after != "" && !protocol.ValidUID(after):
		return fmt.Errorf("after: %w", protocol.ErrInvalidUID)
	case limit < 1:
		return errors.New("presence: a page of members needs a limit of at least 1")
	}
	return nil
}

// cutPage cuts members, listed one longer than limit, to limit, and returns
// the after of the next page if it was longer.
func cutPage(members []string, limit int) ([]string, string) {
	if len(members) <= limit {
		return members, ""
	}
	return members[:limit], members[limit-1]
}

// page sends c, a connection of uid, a page of channel's members as they
// stood at c's base (the position in this tick's log that c's snapshot or
// last diff reflects). An invisible user's own page counts and lists
// itself. It reports false if c is not subscribed to channel.
func (v *view) page(c Client, uid, channel, after string, limit int) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	cv := v.channels[channel]
	if cv == nil {
		return false
	}
	s, ok := cv.subs[c]
	if !ok {
		return false
	}
	count, members := cv.pageAt(int(s.base), after, min(limit, math.MaxInt32)+1)
	count = countSeen(uid, count+len(cv.hidden), maps.Keys(cv.hidden))
	own := ""
	if cv.isHidden(uid) {
		own = uid
		if uid > after {
			members = withOwn(members, uid, min(limit, math.MaxInt32)+1, len(members) > limit)
		}
	}
	members, next := cutPage(members, limit)
	var away []string
	if wasAway := cv.awayAt(int(s.base)); wasAway != nil {
		for _, uid := range members {
			if wasAway(uid) {
				away = append(away, uid)
			}
		}
	}
	c.Send(protocol.MustEncode(protocol.MembersPage{Channel: channel, Count: count, Members: members, Away: away, Users: v.usersLocked(members, own), Next: next}))
	return true
}

// awayAt returns whether a member was away at position base of this tick's
// log: as now, unless the log since has an activity edge of it, whose first
// says what it was before. nil: nobody was.
func (cv *channelView) awayAt(base int) func(uid string) bool {
	was := firstActivity(cv.log[min(base, len(cv.log)):])
	if was == nil && len(cv.away) == 0 {
		return nil
	}
	return func(uid string) bool {
		if a, ok := was[uid]; ok {
			return a
		}
		return cv.isAway(uid)
	}
}

// pageAt returns how many members cv had at position base of this tick's
// log, and up to n of those greater than after, in order. The members now
// are the members at base but for the users the log since nets in or out,
// as the tick's diff will tell the subscriber: those who came in are left
// out, those who went are put back. It costs O(log since base + n).
func (cv *channelView) pageAt(base int, after string, n int) (int, []string) {
	came, gone := netEdges(cv.log[min(base, len(cv.log)):], cv.members.Has, "")
	if len(came) == 0 && len(gone) == 0 {
		return cv.members.Len(), cv.members.After(after, n)
	}
	count := cv.members.Len() - len(came) + len(gone)
	i, found := slices.BinarySearch(gone, after)
	if found {
		i++
	}
	gone = gone[i:] // in at base, out now, and after after: they belong in the page
	out := make([]string, 0, min(n, count))
	for uid := range cv.members.Above(after) {
		for len(gone) > 0 && gone[0] < uid && len(out) < n {
			out, gone = append(out, gone[0]), gone[1:]
		}
		if len(out) == n {
			break
		}
		if _, since := slices.BinarySearch(came, uid); since {
			continue // came in since base
		}
		out = append(out, uid)
	}
	for len(gone) > 0 && len(out) < n {
		out, gone = append(out, gone[0]), gone[1:]
	}
	return count, out
}
