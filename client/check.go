package client

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/presenced/presenced/protocol"
)

// The checks a frame passes before it changes any state. The Client
// follows the server's word, but not a word that contradicts itself, the
// protocol or the request it answers: such a frame comes from a broken or
// hostile server, and applying it would make the state wrong for good (a
// negative count, a member set that no diff can repair) or, for pages,
// never finish.

// broken says what was wrong with a frame about what.
func broken(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", ErrProtocol, what, err)
}

func countErr(n int) error {
	if n < 0 || n > maxCount {
		return fmt.Errorf("count %d", n)
	}
	return nil
}

// sortedErr checks that ids are in strictly ascending order, each after
// after (every ID but "" comes after "").
func sortedErr(ids []string, after string) error {
	prev := after
	for _, id := range ids {
		if id <= prev {
			return fmt.Errorf("member %q out of order after %q", protocol.Truncate(id), protocol.Truncate(prev))
		}
		prev = id
	}
	return nil
}

// amongErr checks that every ID of away is one of members (sorted).
func amongErr(away, members []string) error {
	for _, id := range away {
		if _, ok := slices.BinarySearch(members, id); !ok {
			return fmt.Errorf("%q away but not listed", protocol.Truncate(id))
		}
	}
	return nil
}

func listedErr(listed, count int) error {
	if listed > count {
		return fmt.Errorf("%d members listed of a count of %d", listed, count)
	}
	return nil
}

// checkDiff checks a diff, and normalizes its records (record.go): a
// record over the protocol's bounds, or of someone not among the joins,
// makes the diff broken, as records in a count-only diff do.
func checkDiff(f *protocol.Presence) error {
	var err error
	if f.CountOnly && len(f.Users)+len(f.Updated) > 0 {
		err = errors.New("records in a count-only diff")
	}
	return broken("diff of "+f.Channel, cmp.Or(
		countErr(f.Count),
		err,
		normRecords(f.Users, f.Joins, false),
		normRecords(f.Updated, nil, true),
	))
}

func checkJoined(f *protocol.Joined) error {
	return broken("snapshot of "+f.Channel, cmp.Or(
		countErr(f.Count),
		listedErr(len(f.Members), f.Count),
		sortedErr(f.Members, ""),
		amongErr(f.Away, f.Members),
		normRecords(f.Users, f.Members, false),
	))
}

// checkPage checks a page against the request it answers: at most limit
// members, sorted, each after after, and a next that is its last member.
// Paging ends because next moves forward with every page.
func checkPage(f *protocol.MembersPage, after string, limit int) error {
	var err error
	switch {
	case f.Next != "" && f.Next <= after:
		err = fmt.Errorf("next %q does not come after %q", protocol.Truncate(f.Next), protocol.Truncate(after))
	case len(f.Members) > limit:
		err = fmt.Errorf("%d members, %d asked for", len(f.Members), limit)
	case f.Next != "" && (len(f.Members) == 0 || f.Next != f.Members[len(f.Members)-1]):
		err = fmt.Errorf("next %q is not its last member", protocol.Truncate(f.Next))
	}
	return broken("page of "+f.Channel, cmp.Or(
		err,
		countErr(f.Count),
		listedErr(len(f.Members), f.Count),
		sortedErr(f.Members, after),
		amongErr(f.Away, f.Members),
		normRecords(f.Users, f.Members, false),
	))
}

func checkTyping(f *protocol.TypingUsers) error {
	var err error
	if len(f.Users) > protocol.MaxTypingListed {
		err = fmt.Errorf("%d users listed, at most %d", len(f.Users), protocol.MaxTypingListed)
	}
	return broken("typing in "+f.Channel, cmp.Or(countErr(f.Count), err))
}

// checkWatching checks the records of an answer to a watch: only of users
// it lists online, within the protocol's bounds.
func checkWatching(f *protocol.Watching) error {
	return broken("watch answer", normRecords(f.Users, f.Online, false))
}

// checkStatus checks the records of a status frame as checkWatching does,
// before it is cut to the watched users.
func checkStatus(f *protocol.Status) error {
	return broken("status", cmp.Or(
		normRecords(f.Users, f.Online, false),
		normRecords(f.Updated, nil, true),
	))
}

var errNotWatched = errors.New("about no watched user")

// onlyWatched returns f cut to the users on the watch list, or nil if it
// names none of them. A last seen before 1970 is left out. Its records
// are cut to the kept users too.
func onlyWatched(users map[string]UserState, f *protocol.Status) *protocol.Status {
	keep := func(ids []string) []string {
		var out []string
		for _, id := range ids {
			if _, ok := users[id]; ok {
				out = append(out, id)
			}
		}
		return out
	}
	w := &protocol.Status{Online: keep(f.Online), Offline: keep(f.Offline), Away: keep(f.Away), Active: keep(f.Active)}
	w.Users = keepRecords(f.Users, w.Online)
	w.Updated = keepRecords(f.Updated, keep(slices.Sorted(maps.Keys(f.Updated))))
	if len(w.Online)+len(w.Offline)+len(w.Away)+len(w.Active)+len(w.Updated) == 0 {
		return nil
	}
	for _, id := range w.Offline {
		if ms, ok := f.LastSeen[id]; ok && ms > 0 {
			if w.LastSeen == nil {
				w.LastSeen = map[string]int64{}
			}
			w.LastSeen[id] = ms
		}
	}
	return w
}

// keepRecords returns the records of ids, nil if none has one.
func keepRecords(records map[string]protocol.Record, ids []string) map[string]protocol.Record {
	var out map[string]protocol.Record
	for _, id := range ids {
		if r, ok := records[id]; ok {
			if out == nil {
				out = map[string]protocol.Record{}
			}
			out[id] = r
		}
	}
	return out
}
