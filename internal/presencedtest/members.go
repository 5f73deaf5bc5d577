package presencedtest

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/presenced/presenced/protocol"
)

// MemberList keeps one channel's members as a client of a big channel does,
// from the frames its connection receives: the joined snapshot (cut short
// in a big channel), the members pages it asked for, each the truth between
// its bounds, and the presence diffs. It checks each page against the
// protocol's rules. Ask for one page at a time: a page covers the members
// after After, up to its next.
type MemberList struct {
	Channel string
	// After is where the next page starts: the last snapshot member, or
	// the last page's next; "" once a page came without one.
	After string
	// Limit is the limit of the page asked for, to check the page by.
	Limit int
	// Complete is true while the list holds every member: after a full
	// snapshot, or after pages to the end with no count-only diff since the
	// snapshot or the page that started from the first member.
	Complete bool
	// Count is the count of the last snapshot, page or diff.
	Count int

	set   map[string]bool
	stale bool // a count-only diff came during this pass of pages
}

// Apply updates the list with a text frame the server sent. Frames of
// other types or channels are ignored; it returns the frame's type ("" for
// one ignored) and an error for a frame or page that breaks the protocol.
func (l *MemberList) Apply(data []byte) (string, error) {
	f, err := protocol.ParseServer(data)
	if err != nil {
		return "", nil // not a frame this list is about
	}
	switch m := f.(type) {
	case *protocol.Joined:
		if m.Channel != l.Channel {
			return "", nil
		}
		l.set = make(map[string]bool, m.Count)
		for _, u := range m.Members {
			l.set[u] = true
		}
		l.Count, l.After, l.Complete, l.stale = m.Count, "", len(m.Members) == m.Count, false
		if !l.Complete && len(m.Members) > 0 {
			l.After = m.Members[len(m.Members)-1]
		}
	case *protocol.MembersPage:
		if m.Channel != l.Channel {
			return "", nil
		}
		if err := l.check(m); err != nil {
			return "", fmt.Errorf("page after %q: %w: %s", l.After, err, data)
		}
		if l.After == "" {
			l.stale = false // a new pass
		}
		for u := range l.set {
			if u > l.After && (m.Next == "" || u <= m.Next) {
				delete(l.set, u)
			}
		}
		for _, u := range m.Members {
			l.set[u] = true
		}
		l.Count, l.After = m.Count, m.Next
		if m.Next == "" {
			l.Complete = !l.stale
		}
	case *protocol.Presence:
		if m.Channel != l.Channel {
			return "", nil
		}
		l.Count = m.Count
		if m.CountOnly {
			l.Complete, l.stale = false, true
			break
		}
		for _, u := range m.Joins {
			l.set[u] = true
		}
		for _, u := range m.Leaves {
			delete(l.set, u)
		}
	default:
		return "", nil
	}
	return f.Type(), nil
}

// check applies the protocol's rules to a page: at most Limit members,
// sorted, all after After, next present exactly when the page is full and
// then its last member.
func (l *MemberList) check(m *protocol.MembersPage) error {
	switch {
	case len(m.Members) > l.Limit:
		return fmt.Errorf("%d members, limit %d", len(m.Members), l.Limit)
	case !slices.IsSorted(m.Members) || len(slices.Compact(slices.Clone(m.Members))) != len(m.Members):
		return errors.New("members not sorted, or repeated")
	case len(m.Members) > 0 && m.Members[0] <= l.After:
		return errors.New("a member not after after")
	case m.Next != "" && (len(m.Members) < l.Limit || m.Next != m.Members[len(m.Members)-1]):
		return errors.New("next on a page that is not full, or not its last member")
	case m.Count < len(m.Members):
		return errors.New("count below the page's length")
	}
	return nil
}

// Members returns the members the list holds, sorted.
func (l *MemberList) Members() []string {
	return slices.Sorted(maps.Keys(l.set))
}
